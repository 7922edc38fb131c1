"""Hooks that gather statistics during forward and backward: module inputs/outputs, their gradients, and weight
gradients as they are accumulated (before any data-parallel reduction).

Every hook body is wrapped: a failure is counted by the monitor and the training step carries on untouched.
Gradients of activations are taken with tensor hooks on the module's output and input tensors rather than with
``register_full_backward_hook``, which rewires the autograd graph and breaks modules that modify outputs in place.
"""
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List

import torch

from tbprobe.monitor.stats import tensor_stats

if TYPE_CHECKING:  # pragma: no cover
    from tbprobe.monitor.trainer_mon import TrainerMon

__all__ = ["install_module_hooks", "install_param_hooks", "tensors_of"]


def tensors_of(obj: Any, out: List[torch.Tensor], depth: int = 0) -> List[torch.Tensor]:
    """Floating-point tensors in a module's arguments or output (tuples, lists, dicts, two levels deep)."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            out.append(obj)
    elif depth < 2 and isinstance(obj, (tuple, list)):
        for x in obj:
            tensors_of(x, out, depth + 1)
    elif depth < 2 and isinstance(obj, dict):
        for x in obj.values():
            tensors_of(x, out, depth + 1)
    return out


def _in_backward() -> bool:
    """True while autograd runs a backward pass: a forward seen then is an activation-checkpoint recomputation."""
    try:
        return torch._C._current_graph_task_id() != -1
    except AttributeError:
        return False


def _record(mon: "TrainerMon", node: str, metric: str, tensors: List[torch.Tensor]) -> None:
    many = len(tensors) > 1
    for i, t in enumerate(tensors):
        key = f"{node}/{metric}.{i}" if many else f"{node}/{metric}"
        mon.record(key, tensor_stats(t, mon.config.ops, mon.config.eps), t)


def _grad_hook(mon: "TrainerMon", key: str, grad: torch.Tensor) -> None:
    try:
        if mon.active and grad is not None:
            mon.record(key, tensor_stats(grad, mon.config.ops, mon.config.eps), grad)
    except Exception as exc:  # noqa: BLE001
        mon.fault("activation-gradient hook", exc)


def _forward_hook(mon: "TrainerMon", name: str, counter: Dict[str, int], module, args, kwargs, output) -> None:
    if not mon.active or not module.training or _in_backward():
        return
    try:
        micro = counter["n"] % mon.grad_acc_steps
        counter["n"] += 1
        node = f"{name}:micro{micro}" if mon.grad_acc_steps > 1 else name
        inputs = tensors_of(args, [])
        if kwargs:
            tensors_of(kwargs, inputs, 1)
        outputs = tensors_of(output, [])
        cfg = mon.config
        if not cfg.backward_only:
            _record(mon, node, "input", inputs)
            _record(mon, node, "output", outputs)
        if not cfg.forward_only and torch.is_grad_enabled():
            for metric, group in (("input_grad", inputs), ("output_grad", outputs)):
                many = len(group) > 1
                for i, t in enumerate(group):
                    if t.requires_grad:
                        key = f"{node}/{metric}.{i}" if many else f"{node}/{metric}"
                        # (removed at the step's end: a tensor that outlives the step, a Parameter or a learned
                        # query fed to the module, would gather one more hook every step)
                        mon.tensor_hooks.append(t.register_hook(partial(_grad_hook, mon, key)))
    except Exception as exc:  # noqa: BLE001
        mon.fault("forward hook", exc)


def install_module_hooks(mon: "TrainerMon", modules) -> List[Any]:
    handles = []
    for name, module in modules:
        counter = {"n": 0}
        mon.micro_counters.append(counter)
        handles.append(module.register_forward_hook(partial(_forward_hook, mon, name, counter), with_kwargs=True))
    return handles


def _param_hook(mon: "TrainerMon", name: str, state: Dict[str, int], param: torch.Tensor) -> None:
    """Runs right after autograd accumulates this weight's gradient, before DDP's reducer sees it."""
    try:
        if not mon.active:
            return
        micro = state["n"] % mon.grad_acc_steps
        state["n"] += 1
        per_micro = mon.config.monitor_mbs_grad
        if not per_micro and micro != mon.grad_acc_steps - 1:
            return  # the accumulated gradient is complete only after the last micro step
        grad = param.main_grad if mon.params_have_main_grad else param.grad
        if grad is None:
            return
        node = f"{name}:micro{micro}" if per_micro and mon.grad_acc_steps > 1 else name
        # A clone is not needed: the statistics kernel is queued before the reduction is launched.
        mon.record(f"{node}/grad_unreduced", tensor_stats(grad, mon.config.ops, mon.config.eps), grad)
    except Exception as exc:  # noqa: BLE001
        mon.fault("weight-gradient hook", exc)


def install_param_hooks(mon: "TrainerMon", params) -> List[Any]:
    handles = []
    for name, param in params:
        if not hasattr(param, "register_post_accumulate_grad_hook"):
            continue
        state = {"n": 0}
        mon.micro_counters.append(state)
        handles.append(param.register_post_accumulate_grad_hook(partial(_param_hook, mon, name, state)))
    return handles
