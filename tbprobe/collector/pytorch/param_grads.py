"""Parameter gradients at L0: a module's `parameters_grad` record (ParamGrads, fed by hooks on its own parameters),
and the reads of a module's own parameters the forward records and those hooks share."""
from typing import TYPE_CHECKING, Any, Dict, List

import torch

from tbprobe.collector.naming import params_grad_name
from tbprobe.collector.pytorch.own_hook import own_hook

if TYPE_CHECKING:
    from tbprobe.collector.pytorch.module_hooks import ModuleHooks

__all__ = ["ParamGrads", "parameter_items", "param_sig", "params_changed", "own_parameters"]

_NoTorchFunction = torch._C.DisableTorchFunction
_Uninitialized = torch.nn.parameter.UninitializedParameter


class ParamGrads:
    """Gradients of one module's own parameters in one backward pass; emitted when the last one arrives, or, when
    some never come in that pass (a parameter the forward did not use, an expert no token reached), with those that
    came when the pass ends, as the reference emits them."""

    def __init__(self, hooks: "ModuleHooks", prefix: str, names: List[str]) -> None:
        self.hooks = hooks
        self.prefix = prefix
        self.names = names
        self.pending: Dict[str, Any] = {}
        self.step = -1
        self.ran = -1          # the last step in which the module's forward ran (see on_grad)
        self.module_id = 0
        self.keep = False      # whether the record of the pending gradients is written (the filters' answer)
        self.listed = False    # in hooks.partial, waiting for the pass's end
        self.first_name = params_grad_name(prefix, 0)   # the filters decide on the first call's name
        self.counter = prefix + ".parameters_grad"      # its call counter's key
        # the parameters hooked (hook()): their hooks, and what they were, to see a change
        self.handles: List[Any] = []
        self.sig: tuple = ()
        self.lazy = False      # some were not materialised yet (LazyLinear): hooked again after the forward

    def on_accumulated(self, pname: str, param: torch.Tensor) -> None:
        # (a parameter's post-accumulate hook: param.grad now holds what the optimizer will use)
        self.on_grad(pname, param.grad)

    def on_grad(self, pname: str, grad: torch.Tensor) -> None:   # returns None: the gradient is left as it is
        s = self.hooks.session
        # A module that did not run this step has no parameter gradients of its own to report, even when it shares
        # its parameters with one that did (T5's `shared` embedding, tied to its encoder's and decoder's), as in
        # the reference.
        if not s.active or s.busy or self.ran != s.step or (
                s.scope_ids is not None and self.module_id not in s.scope_ids):
            return
        s.busy += 1
        guard = _NoTorchFunction()   # (a backward pass runs with the operator mode on: backward_pass.py)
        guard.__enter__()
        try:
            if self.step != s.step:
                self.pending = {}
                self.step = s.step
            if not self.pending:
                self.keep = s.record_data(self.first_name)
            keep = self.keep
            # (the record's name, and its saved tensors' files, carry the index it will get when complete)
            self.pending[pname] = [s.items.item_at(grad, params_grad_name(
                self.prefix, s.counters.peek(self.counter)), pname)] if keep else None
            if len(self.pending) == len(self.names):
                self.emit()
            elif not self.listed:
                self.hooks.note_partial(self)
        except Exception as exc:
            s.guard.report("parameter gradient hook", exc)
        finally:
            guard.__exit__(None, None, None)
            s.busy -= 1

    def emit(self) -> None:
        """The record of the gradients that came, under the module's next parameters_grad index."""
        s = self.hooks.session
        n = s.counters.next(self.counter)
        if self.keep:
            s.record.add_entry(params_grad_name(self.prefix, n), dict(self.pending))
        self.pending = {}

    def hook(self, mod: torch.nn.Module) -> None:
        """Hooks on the module's own parameters that need a gradient (again: the ones it has now)."""
        for h in self.handles:
            h.remove()
        self.handles = []
        self.pending = {}
        self.lazy = False
        names = []
        for n, p in mod.named_parameters(recurse=False):
            if isinstance(p, _Uninitialized):
                self.lazy = True      # (a lazy module's: materialised by its first forward)
                continue
            if not p.requires_grad:
                continue
            # The gradient as it stands after this backward's accumulation into p.grad, as the reference reads
            # it: with gradient accumulation, parameters_grad.1 is the sum over both micro-batches. (A partial of
            # the bound method: no Python frame between autograd and the hook.)
            if p.is_leaf and hasattr(p, "register_post_accumulate_grad_hook"):
                self.handles.append(p.register_post_accumulate_grad_hook(own_hook(self.on_accumulated, n)))
            else:
                self.handles.append(p.register_hook(own_hook(self.on_grad, n)))
            names.append(n)
        self.names = names
        self.sig = param_sig(mod)
        self.hooks.handles.extend(self.handles)


def parameter_items(items: Any, name: str, mod: torch.nn.Module) -> dict:
    """A forward record's "parameters": the items of the module's own parameters."""
    return {pn: items.item_at(p, f"{name}.parameters", pn) for pn, p in own_parameters(mod)}


def param_sig(mod: torch.nn.Module) -> tuple:
    """What decides a module's parameter hooks: which parameter objects it has (None for an empty slot, a
    Linear's bias=False), and which need a gradient."""
    return tuple((id(p), p is not None and p.requires_grad) for p in mod._parameters.values())


def params_changed(mod: torch.nn.Module, sig: tuple) -> bool:
    """Whether `param_sig(mod)` differs from `sig`, without building it (each forward of each module asks).
    A plain tensor in a parameter's slot is not a change: nn.Module refuses one there, so it was put in for the
    call alone by torch.func.functional_call (the detached or GradTrackingTensor weights of per-sample gradients
    under vmap(grad(...)), MAML's fast weights). The module's own parameters come back when the call returns, and
    their hooks must stay: moved onto the call's tensors, they missed the step's real backward (no
    parameters_grad at all)."""
    params = mod._parameters
    for p in params.values():
        if p is not None and not isinstance(p, torch.nn.Parameter):
            return False
    if len(params) != len(sig):
        return True
    for (pid, grad), p in zip(sig, params.values()):
        if id(p) != pid or (p is not None and p.requires_grad) != grad:
            return True
    return False


def own_parameters(mod: torch.nn.Module):
    """mod.named_parameters(recurse=False) without its generator machinery (one dict walk per hook call)."""
    params = mod.__dict__.get("_parameters")
    if params is None:
        return mod.named_parameters(recurse=False)
    seen = set()
    out = []
    for n, p in params.items():
        if p is not None and id(p) not in seen:
            seen.add(id(p))
            out.append((n, p))
    return out
