"""Hooks that gather statistics during forward and backward: module inputs/outputs, their gradients, and weight
gradients as they are accumulated (before any data-parallel reduction).

Every hook body is wrapped: a failure is counted by the monitor and the training step carries on untouched.
No ``register_full_backward_hook``: it wraps inputs and outputs in a custom autograd Function, which breaks modules
that modify their outputs in place. Instead:

- an output's gradient comes from a tensor hook on the output;
- an input's gradient is the module's own share of it, as the reference's full backward hook gives it: a tensor
  several modules consume (the normed hidden state that q_proj, k_proj and v_proj all take) has a total gradient
  that is no module's. The collector's machinery gives the share (tbprobe/collector/_cgrad.cpp): ``call_start``
  notes the inputs' gradient edges as the call begins (a forward pre-hook), ``hook_consumers`` hooks the autograd
  nodes the call made that send each input a gradient, and reports their sum, when the call ends. Nothing is added
  to the graph, so training is bit for bit the same. Without the extension, and under torch.compile, the module
  gets plain views of its inputs (the collector's ``alias_inputs``), whose tensor hooks see the module's share;
  there the input's total gradient may be summed in another order.
"""
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import torch

from tbprobe.collector.pytorch.module_hooks import alias_inputs
from tbprobe.collector.pytorch.session import flatten_tensors
from tbprobe.monitor.stats import tensor_stats

try:   # a module's share of its inputs' gradients, from the nodes it made (the collector's C++ extension)
    from tbprobe.collector._cgrad import call_start, hook_consumers
except ImportError:   # pragma: no cover - (the extension is built by `pip install`; views then)
    call_start = hook_consumers = None

if TYPE_CHECKING:  # pragma: no cover
    from tbprobe.monitor.trainer_mon import TrainerMon

__all__ = ["install_module_hooks", "install_param_hooks", "tensors_of"]

_compiling = torch.compiler.is_compiling
_VIEWS = "views"   # a pending call whose inputs were replaced by views (no extension, or torch.compile)


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


def _inputs_of(args: tuple, kwargs: dict) -> List[torch.Tensor]:
    inputs = tensors_of(args, [])
    if kwargs:
        tensors_of(kwargs, inputs, 1)
    return inputs


def _in_backward() -> bool:
    """True while autograd runs a backward pass: a forward seen then is an activation-checkpoint recomputation."""
    try:
        return torch._C._current_graph_task_id() != -1
    except AttributeError:
        return False


def _in_transform() -> bool:
    """True inside a torch.func transform (vmap, grad, jacrev, ...): a forward there runs on the transform's
    wrapped tensors (per-sample under vmap), whose statistics are no activation of the step, and a .item() in them
    raises (vmap). Such forwards are skipped; the step's own forward is recorded as ever."""
    try:
        return torch._C._functorch.maybe_current_level() is not None
    except AttributeError:   # pragma: no cover - (torch without functorch)
        return False


def _key(node: str, metric: str, i: int, n: int) -> str:
    return f"{node}/{metric}.{i}" if n > 1 else f"{node}/{metric}"


def _record(mon: "TrainerMon", node: str, metric: str, tensors: List[torch.Tensor]) -> None:
    for i, t in enumerate(tensors):
        # (an input that needs no gradient, a mask or positions, may be non-finite by design: TrainerMon.record)
        mon.record(_key(node, metric, i, len(tensors)), tensor_stats(t, mon.config.ops, mon.config.eps), t,
                   quiet=metric == "input" and not t.requires_grad)


def _grad_hook(mon: "TrainerMon", key: str, grad: torch.Tensor) -> None:
    try:
        if mon.active and grad is not None:
            mon.record(key, tensor_stats(grad, mon.config.ops, mon.config.eps), grad)
    except Exception as exc:  # noqa: BLE001
        mon.fault("activation-gradient hook", exc)


def _share_hook(mon: "TrainerMon", keys: List[str], step: int, i: int, grad: Any) -> None:
    """The module's share of its input i's gradient (hook_consumers; Ellipsis where the pass computes none, None
    where its nodes sent nothing defined). From the C++ hook, on autograd's thread, with the GIL."""
    try:
        # (the nodes outlive the step where the graph is retained: a later pass through them is not this step's)
        if mon.active and mon.step == step and isinstance(grad, torch.Tensor):
            mon.record(keys[i], tensor_stats(grad, mon.config.ops, mon.config.eps), grad)
    except Exception as exc:  # noqa: BLE001
        mon.fault("activation-gradient hook", exc)


def _wants_grads(mon: "TrainerMon", module) -> bool:
    return (mon.active and module.training and not mon.config.forward_only and torch.is_grad_enabled()
            and not _in_backward() and not _in_transform())


def _pre_hook(mon: "TrainerMon", pending: List[Any], module, args, kwargs):
    """Before the call: the inputs' gradient edges (call_start), or views of the inputs to hook instead."""
    if not _wants_grads(mon, module):
        return None
    entry: Any = None   # (None: the forward hook takes the inputs' own gradients, as a last resort)
    replaced = None
    try:
        if call_start is not None and not _compiling():
            inputs = _inputs_of(args, kwargs)
            pos = [i for i, t in enumerate(inputs) if t.requires_grad]
            if pos:
                ins = [inputs[i] for i in pos]
                entry = (call_start(ins), pos, ins, len(inputs))
        else:
            replaced = alias_inputs(args, kwargs)
            entry = _VIEWS
    except Exception as exc:  # noqa: BLE001
        mon.fault("forward pre-hook", exc)
    pending.append(entry)   # (one per call the forward hook sees, whatever happened above)
    return replaced


def _hook_input_shares(mon: "TrainerMon", node: str, module, entry: tuple, output) -> List[Tuple[str, torch.Tensor]]:
    """hook_consumers for one call; returns the inputs to take the gradient of by tensor hooks: those the call
    returns as they came (an identity module: no node of the call's sends them anything; their tensor's gradient,
    the whole of it, as before)."""
    start, pos, ins, n_inputs = entry
    keys = [_key(node, "input_grad", i, n_inputs) for i in pos]
    outs = [t for t in flatten_tensors(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    counts, _used = hook_consumers(start, outs, partial(_share_hook, mon, keys, mon.step), module)
    # n == 0 and not returned: an input the call does not differentiate through (no row, as for an input that
    # needs no gradient); n < 0: a view the call changed in place, whose share is not known (no row)
    return [(keys[j], ins[j]) for j, n in enumerate(counts) if n == 0 and any(o is ins[j] for o in outs)]


def _forward_hook(mon: "TrainerMon", name: str, counter: Dict[str, int], pending: List[Any], module, args, kwargs,
                  output) -> None:
    if not mon.active or not module.training or _in_backward() or _in_transform():
        return
    entry = pending.pop() if pending and _wants_grads(mon, module) else None
    try:
        micro = counter["n"] % mon.grad_acc_steps
        counter["n"] += 1
        node = f"{name}:micro{micro}" if mon.grad_acc_steps > 1 else name
        inputs = _inputs_of(args, kwargs)
        outputs = tensors_of(output, [])
        cfg = mon.config
        if not cfg.backward_only:
            _record(mon, node, "input", inputs)
            _record(mon, node, "output", outputs)
        if cfg.forward_only or not torch.is_grad_enabled():
            return
        hooked = [(_key(node, "output_grad", i, len(outputs)), t) for i, t in enumerate(outputs)]
        if isinstance(entry, tuple):
            try:
                hooked += _hook_input_shares(mon, node, module, entry, output)
            except Exception as exc:  # noqa: BLE001 - (the output gradients are still taken)
                mon.fault("input-gradient shares", exc)
        elif entry is _VIEWS or entry is None:
            # (views: `args` are the views the pre-hook gave the module, their gradient its share)
            hooked += [(_key(node, "input_grad", i, len(inputs)), t) for i, t in enumerate(inputs)]
        for key, t in hooked:
            if t.requires_grad:
                # (removed at the step's end: a tensor that outlives the step, a Parameter or a learned
                # query fed to the module, would gather one more hook every step)
                mon.tensor_hooks.append(t.register_hook(partial(_grad_hook, mon, key)))
    except Exception as exc:  # noqa: BLE001
        mon.fault("forward hook", exc)


def install_module_hooks(mon: "TrainerMon", modules) -> List[Any]:
    handles = []
    for name, module in modules:
        counter = {"n": 0}
        pending: List[Any] = []   # the calls begun (pre-hook), for their forward hook: a stack, as calls nest
        mon.micro_counters.append(counter)
        mon.pending_calls.append(pending)
        handles.append(module.register_forward_pre_hook(partial(_pre_hook, mon, pending), with_kwargs=True))
        handles.append(module.register_forward_hook(partial(_forward_hook, mon, name, counter, pending),
                                                    with_kwargs=True))
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
