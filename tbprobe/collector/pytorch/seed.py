"""seed_all: make runs repeatable (python, numpy, torch; deterministic algorithms when asked)."""
import logging
import os
import random

import numpy as np
import torch

from tbprobe.errors import TbprobeError

__all__ = ["seed_all"]


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False, is_enhanced: bool = False) -> None:
    """Seed every generator; `mode=True` also asks torch for deterministic algorithms.

    `rm_dropout=True` turns dropout off (p=0) so that two runs differ only by what is being compared.
    `is_enhanced` is taken for the reference's signature; its random-API patching is not done here (one warning)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:
        raise TbprobeError(f"seed_all: seed must be an int in [0, 2**32), got {seed!r}")
    if not isinstance(mode, bool):
        raise TbprobeError(f"seed_all: mode must be true or false, got {mode!r}")
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
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    if rm_dropout:
        import torch.nn.functional as F

        def _no_dropout(input, p=0.5, training=True, inplace=False):  # noqa: ARG001
            return input

        F.dropout = _no_dropout
