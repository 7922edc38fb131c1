"""Run a backward pass with the operator mode on, so the calls made inside it are recorded as the reference records
them: activation checkpointing's recomputed forward (and, with reentrant checkpointing, the backward of the
recomputed graph, the only one there is), custom autograd Functions' backward, users' backward hooks.

`loss.backward()`, `torch.autograd.backward(...)` and `torch.autograd.grad(...)` are themselves torch functions: the
mode receives them, and TorchFunctionMode is off while its handler runs, so a backward started there would run
with nothing recorded. The handler instead pushes the mode again and calls the function with torch's one-hop skip
set, so that the function's own dispatch check lets it through once and runs its body (and the engine) with the
mode on. Where this torch lacks the skip, the backward runs as before, unrecorded inside.
"""
from typing import Any

import torch

__all__ = ["starts_backward", "run_with_mode", "SKIPS_CHECKS"]

_skip_next = getattr(torch._C, "_set_skip_next_torch_function", None)
SKIPS_CHECKS = _skip_next is not None   # whether run_with_mode runs a function's body with the mode on
# (empty where the skip is missing: nothing then takes run_with_mode's path)
_BACKWARD_FUNCS = frozenset((torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
                            if _skip_next is not None else ())


def starts_backward(func: Any) -> bool:
    """Whether `func` starts a backward pass that run_with_mode can run with the mode on. (The mode asks this of
    every function it does not record, so it is one set lookup.)"""
    try:
        return func in _BACKWARD_FUNCS
    except TypeError:   # unhashable
        return False


def run_with_mode(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """`func(*args, **kwargs)` with `mode` pushed, past func's own torch-function check (where this torch lacks the
    skip, as it is, with the mode off)."""
    if _skip_next is None:
        return func(*args, **kwargs)
    with mode:
        _skip_next(True)
        try:
            return func(*args, **kwargs)
        finally:
            _skip_next(False)   # (consumed by func's check; cleared in case func raised before it)
