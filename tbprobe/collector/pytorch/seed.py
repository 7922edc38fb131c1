"""seed_all: make runs repeatable (python, numpy, torch; deterministic algorithms when asked)."""
import logging
import os
import random

import numpy as np
import torch

from tbprobe.collector.pytorch import api_names
from tbprobe.errors import TbprobeError

__all__ = ["seed_all"]

_deterministic_by_us = [False]   # whether the last seed_all() turned torch's deterministic algorithms on


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False, is_enhanced: bool = False) -> None:
    """Seed every generator; `mode=True` also asks torch for deterministic algorithms.

    `rm_dropout=True` turns dropout off (p=0) so that two runs differ only by what is being compared.
    `is_enhanced` is taken for the reference's signature; its random-API patching is not done here (one warning)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:
        raise TbprobeError(f"seed_all: seed must be an int in [0, 2**32), got {seed!r}")
    if not isinstance(mode, bool):
        raise TbprobeError(f"seed_all: mode must be true or false, got {mode!r}")
    if not isinstance(rm_dropout, bool):
        raise TbprobeError(f"seed_all: rm_dropout must be true or false, got {rm_dropout!r}")
    if not isinstance(is_enhanced, bool):
        raise TbprobeError(f"seed_all: is_enhanced must be true or false, got {is_enhanced!r}")
    if is_enhanced:
        logging.getLogger("tbprobe.collector").warning(
            "tbprobe: seed_all(is_enhanced=True): the reference's fixing of every random API's state is not "
            "supported; the generators are seeded once")
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # (warn_only: an operator without a deterministic kernel is named in a warning, not raised into training)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    elif _deterministic_by_us[0] and torch.are_deterministic_algorithms_enabled():
        # mode=False after an earlier seed_all(mode=True): determinism off again, as the reference does (a
        # setting of the user's own is left as it is)
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
    _deterministic_by_us[0] = mode
    if rm_dropout:
        _remove_dropout()


def _remove_dropout() -> None:
    """F.dropout, F.dropout2d and F.dropout3d (what nn.Dropout, Dropout2d and Dropout3d call) with p=0: still
    called, and so still recorded at L1 and mix, as the reference records them."""
    import torch.nn.functional as F

    for name in ("dropout", "dropout2d", "dropout3d"):
        orig = getattr(F, name)
        orig = getattr(orig, "_tbprobe_original", orig)   # (seed_all called again: wrap the original once)

        def no_dropout(input, p=0.5, training=True, inplace=False, _orig=orig):  # noqa: ARG001
            return _orig(input, 0.0, training, inplace)

        no_dropout.__name__ = name
        no_dropout._tbprobe_original = orig
        # (F's own code hands the operator mode F's current function, this one: recorded as the original)
        api_names.alias(no_dropout, orig)
        setattr(F, name, no_dropout)
