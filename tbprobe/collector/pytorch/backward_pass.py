"""Run a backward pass with the operator mode on, so the calls made inside it are recorded as the reference records
them: activation checkpointing's recomputed forward (and, with reentrant checkpointing, the backward of the
recomputed graph, the only one there is), custom autograd Functions' backward, users' backward hooks.

`loss.backward()` and `torch.autograd.backward(...)` are themselves torch functions: the mode receives them, and
TorchFunctionMode is off while its handler runs, so a backward started there would run with nothing recorded. The
handler instead pushes the mode again and starts the engine itself, as torch.autograd.backward does after its
dispatch check (its argument handling is reused, not rewritten). Where this torch lacks those helpers, the backward
runs as before, unrecorded inside.
"""
from typing import Any, Callable, Optional

import torch

__all__ = ["backward_runner"]

try:
    from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
    from torch.autograd.graph import _engine_run_backward
except ImportError:   # another torch: backward_runner gives None
    _engine_run_backward = None


def _as_tuple(value: Any) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (torch.Tensor, torch.autograd.graph.GradientEdge)):
        return (value,)
    if type(value) is dict:
        return tuple(value.values())
    return tuple(value)


def _run(tensors: Any, grad_tensors: Any = None, retain_graph: Optional[bool] = None, create_graph: bool = False,
         inputs: Any = None) -> None:
    tensors = _as_tuple(tensors)
    inputs_tuple = _as_tuple(inputs)
    if inputs is not None and not inputs_tuple:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    grads = _make_grads(tensors, _tensor_or_tensors_to_tuple(grad_tensors, len(tensors)), is_grads_batched=False)
    if retain_graph is None:
        retain_graph = create_graph
    _engine_run_backward(tensors, grads, retain_graph, create_graph, inputs_tuple, allow_unreachable=True,
                         accumulate_grad=True)


def _tensor_backward(self: torch.Tensor, gradient: Any = None, retain_graph: Optional[bool] = None,
                     create_graph: bool = False, inputs: Any = None) -> None:
    _run(self, gradient, retain_graph, create_graph, inputs)


def _autograd_backward(tensors: Any, grad_tensors: Any = None, retain_graph: Optional[bool] = None,
                       create_graph: bool = False, grad_variables: Any = None, inputs: Any = None) -> None:
    _run(tensors, grad_tensors if grad_tensors is not None else grad_variables, retain_graph, create_graph, inputs)


def backward_runner(func: Any) -> Optional[Callable[..., None]]:
    """The engine call for `func` when it starts a backward pass (Tensor.backward, torch.autograd.backward) on plain
    tensors, else None."""
    if _engine_run_backward is None:
        return None
    if func is torch.Tensor.backward:
        return _tensor_backward
    if func is torch.autograd.backward:
        return _autograd_backward
    return None
