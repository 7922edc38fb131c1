"""Which modules and parameters the config's ``targets`` select, under the names the user sees.

Wrappers are looked through so a target written for the bare model works on the wrapped one: DDP's ``module.``,
FSDP1's ``_fsdp_wrapped_module.``, activation checkpointing's ``_checkpoint_wrapped_module.`` and torch.compile's
``_orig_mod.`` are dropped from names.
"""
import difflib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import torch

from tbprobe.errors import TbprobeError

__all__ = ["Selection", "select_targets", "trainable", "clean_name", "print_structure", "STRUCT_LOG_LINES"]

_log = logging.getLogger("tbprobe.monitor")

STRUCT_LOG_LINES = 200   # print_struct: modules listed in the log (the file has them all)

_WRAPPER_PARTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def clean_name(name: str) -> str:
    return ".".join(p for p in name.split(".") if p not in _WRAPPER_PARTS)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    while isinstance(model, DistributedDataParallel) or type(model).__name__ in ("DataParallel",):
        model = model.module
    return model


@dataclass
class Selection:
    modules: List[Tuple[str, torch.nn.Module]] = field(default_factory=list)  # (display name, module)
    params: List[Tuple[str, torch.nn.Parameter]] = field(default_factory=list)  # (display name, parameter)


def _split_chunk(target: str, n_chunks: int) -> Tuple[List[int], str]:
    """"1:layers.0" applies to model chunk 1 only (the reference's vpp prefix); a plain name to every chunk."""
    head, sep, rest = target.partition(":")
    if sep and head.isdigit():
        return [int(head)], rest
    return list(range(n_chunks)), target


def _under(name: str, target: str) -> bool:
    return target == "" or name == target or name.startswith(target + ".")


def select_targets(models: Sequence[torch.nn.Module], targets: Dict[str, object], all_modules: bool) -> Selection:
    """Modules (exact name) and parameters (name under a target) to monitor; TbprobeError for a target that
    matches neither in any chunk."""
    sel = Selection()
    chunks = [_unwrap(m) for m in models]
    prefix = [f"vp{i}:" if len(chunks) > 1 else "" for i in range(len(chunks))]
    per_chunk: List[Dict[str, str]] = [{} for _ in chunks]  # chunk -> {clean target name: original key}
    for key in targets:
        idx, name = _split_chunk(key, len(chunks))
        for i in idx:
            if 0 <= i < len(chunks):
                per_chunk[i][clean_name(name)] = key
    matched = set()
    all_module_names: List[str] = []
    for i, chunk in enumerate(chunks):
        wanted = per_chunk[i]
        seen_mod = set()
        for raw, mod in chunk.named_modules():
            name = clean_name(raw)
            all_module_names.append(name)
            if name in seen_mod:
                continue
            seen_mod.add(name)
            if name in wanted:
                matched.add(wanted[name])
            if (all_modules and name) or (name in wanted and name != ""):
                sel.modules.append((prefix[i] + (name or "model"), mod))
        seen_par = set()
        for raw, par in chunk.named_parameters():
            # Frozen parameters are selected too and recorded at the steps they require a gradient at
            # (trainable(): a fine-tuning schedule unfreezing layers got nothing of them, they were left out
            # here for good); they still match no target while frozen, as before.
            name = clean_name(raw)
            if name in seen_par:
                continue
            seen_par.add(name)
            hits = [key for t, key in wanted.items() if _under(name, t)]
            if par.requires_grad:
                matched.update(hits)
            if hits or not targets:
                sel.params.append((prefix[i] + name, par))
    missing = [k for k in targets if k not in matched]
    if missing:
        key = missing[0]
        close = difflib.get_close_matches(_split_chunk(key, len(chunks))[1], all_module_names, n=3)
        hint = f"; close names: {', '.join(close)}" if close else ""
        raise TbprobeError(f"monitor target '{key}' matches no module or parameter of the model{hint}")
    return sel


def trainable(params: Sequence[Tuple[str, torch.nn.Parameter]]) -> List[Tuple[str, torch.nn.Parameter]]:
    """The selected parameters that require a gradient now (frozen ones have no series while frozen)."""
    return [(n, p) for n, p in params if p.requires_grad]


def print_structure(models: Sequence[torch.nn.Module], output_root: str, rank: int) -> str:
    """The config's ``print_struct``: the names ``targets`` takes, every module's (with its class), logged and
    written to ``<output_root>/module_struct/rank<R>/module_struct.json``. Training goes on (the reference stops
    the run after its first step). Returns the file's path ("" where it could not be written)."""
    chunks = [_unwrap(m) for m in models]
    struct: Dict[str, str] = {}
    for i, chunk in enumerate(chunks):
        prefix = f"{i}:" if len(chunks) > 1 else ""
        for raw, mod in chunk.named_modules():
            name = clean_name(raw)
            if name:
                struct.setdefault(prefix + name, type(mod).__name__)
    path = os.path.join(output_root, "module_struct", f"rank{rank}", "module_struct.json")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(struct, f, indent=1)
    except OSError as exc:
        _log.warning("tbprobe monitor: print_struct: cannot write %s (%s)", path, exc)
        path = ""
    if rank != 0:   # (rank 0 lists them; the other ranks say where their own list is)
        _log.warning("tbprobe monitor: print_struct: the model's %d modules are in %s", len(struct), path or "-")
        return path
    width = max((len(n) for n in struct), default=0)
    lines = [f"  {n:<{width}}  {c}" for n, c in list(struct.items())[:STRUCT_LOG_LINES]]
    if len(struct) > STRUCT_LOG_LINES:
        lines.append(f"  ... and {len(struct) - STRUCT_LOG_LINES} more" + (f" (all in {path})" if path else ""))
    _log.warning("tbprobe monitor: print_struct: the model's %d modules, named as 'targets' takes them%s "
                 "(training goes on):\n%s", len(struct), f" (also in {path})" if path else "", "\n".join(lines))
    return path
