"""L1/mix: operator capture through one interception point, torch.overrides.TorchFunctionMode.

The mode sees torch.*, Tensor methods and operators and torch.nn.functional; only the outermost call is seen
(the mode is off inside its own handler). A few Tensor dunders are re-exposed by thin wrappers only to tell
`x + y` (`Tensor.__add__`) from `x.add(y)`: their C implementation reports the plain method.
Optimizer work is grouped under `optimizer` through torch's global optimizer step hooks, gradient clipping under
`clip_grad` through wrappers of torch.nn.utils' clipping functions.
"""
import functools
import sys
import threading
import types
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, handle_torch_function, has_torch_function

from tbprobe.collector.naming import api_name
from tbprobe.collector.pytorch.api_names import (
    BY_CALLER,
    DUNDER_ALIASES,
    UNRECORDED_OPERATORS,
    alias,
    caller_named,
    lookup,
    passes_through,
    risk_of,
)
from tbprobe.collector.pytorch.backward_pass import SKIPS_CHECKS, run_with_mode, starts_backward
from tbprobe.collector.pytorch.call_args import as_called
from tbprobe.collector.pytorch.session import Session, flatten_tensors

__all__ = ["ApiCapture"]

_dunder = threading.local()
_CLIPPING = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_")
# torch.nn.functional's functions written in Python that never hand themselves to the mode (F.sigmoid is
# `input.sigmoid()`, F.upsample calls F.interpolate): seen as Tensor.sigmoid and Functional.interpolate, where the
# reference, which wraps F's attributes, records Functional.sigmoid and Functional.upsample (_dispatching)
_PYTHON_FUNCTIONALS = ("sigmoid", "tanh", "upsample", "upsample_nearest", "upsample_bilinear")
# torch.nn.functional's functions written in Python whose work is done by calls the reference records (F.relu is
# torch.relu, F.softmax Tensor.softmax, F.normalize Tensor.norm, clamp_min and a division). Called through a
# reference taken before the reference wraps F's attributes (nn.TransformerEncoderLayer's default activation is
# F.relu, bound when torch is imported; `from torch.nn.functional import softmax` at the top of a file), the
# reference never sees the call, only the calls inside: Torch.relu where tbprobe named Functional.relu. tbprobe
# wraps them too while a step is collected (as _PYTHON_FUNCTIONALS: ApiCapture.enter), tells such a call by the
# frame that hands it to the mode (_stale_call), and records the calls inside instead. Those whose inside neither
# tool names (F.silu is torch._C._nn.silu, F.gelu a C function) stay recorded as themselves, a record the
# reference's dump lacks.
# (Measured against msprobe 26.2.0 function by function: docs/compatibility.md, "A functional taken before".)
_STALE_BODIES = ("relu", "selu", "celu", "rrelu", "softsign", "tanhshrink", "softmax", "softmin", "log_softmax",
                 "layer_norm", "group_norm", "instance_norm", "normalize", "embedding", "kl_div",
                 "binary_cross_entropy_with_logits")
# F.max_pool2d and its kin are dispatchers torch makes (boolean_dispatch, on return_indices) over two functions
# that hand the mode what F's names hold. The reference records F.max_pool2d(x, 2, return_indices=True) as
# Functional.max_pool2d, where tbprobe saw Functional.max_pool2d_with_indices; through a reference taken before
# it wraps F, it records the calls inside (Torch.max_pool2d, Functional.adaptive_max_pool1d_with_indices,
# Torch.max_pool1d_with_indices ...). Wrapped as _STALE_BODIES, with the functions they dispatch to.
_POOL_DISPATCHERS = ("max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                     "adaptive_max_pool3d", "fractional_max_pool2d", "fractional_max_pool3d")
_STALE = (*_STALE_BODIES, *_POOL_DISPATCHERS, *(n + "_with_indices" for n in _POOL_DISPATCHERS))
_IS_STALE = frozenset(_STALE)
# calls whose CPU kernels update running statistics (buffers) in place without bumping their version
_BUFFER_UPDATES = frozenset({"batch_norm", "instance_norm", "native_batch_norm", "_native_batch_norm_legit",
                             "batch_norm_update_stats", "_batch_norm_impl_index"})
# unrecorded calls that change tensors in place without bumping their version (GradScaler's unscaling of the
# gradients on CPU): what tbprobe remembers of those tensors (their parameters_grad items) is forgotten, or the
# optimizer's records read the gradients as they were before (65536 times too large)
_UNVERSIONED_WRITES = frozenset(f for f in (getattr(torch, "_amp_foreach_non_finite_check_and_unscale_", None),
                                            getattr(torch, "_amp_update_scale_", None)) if f is not None)
_DROPOUTS = {"dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "alpha_dropout_",
             "feature_alpha_dropout", "feature_alpha_dropout_", "feature_dropout", "feature_dropout_"}


def _dropout_p(args: tuple, kwargs: dict) -> object:
    return args[1] if len(args) > 1 else kwargs.get("p", 0.5)


def _dunder_wrapper(dname: str, orig):
    def wrapper(*args, **kwargs):
        _dunder.name = dname
        try:
            return orig(*args, **kwargs)
        finally:
            _dunder.name = None

    wrapper.__name__ = dname
    wrapper.__wrapped__ = orig
    return wrapper


def _pop_own(mode: TorchFunctionMode) -> None:
    """Take `mode` off the stack of torch-function modes wherever it is. TorchFunctionMode.__exit__ pops the top,
    which is another mode when one was pushed since (the user's own, or another debugger's started later): that
    one was popped in place of tbprobe's, and its own exit later popped tbprobe's. The modes above stay, in order."""
    above = []
    while torch._C._len_torch_function_stack():
        top = torch._C._pop_torch_function_stack()
        if top is mode:
            break
        above.append(top)
    for m in reversed(above):
        torch._C._push_on_torch_function_stack(m)


_VIEW_AS = torch.Tensor.view_as
_NoTorchFunction = torch._C.DisableTorchFunction
_FUNCTION_APPLY = torch.autograd.function.Function.apply.__func__.__code__
# the custom Function a user's full backward hook runs through (torch.utils.hooks.BackwardHook)
_BACKWARD_HOOK_FUNCTION = torch.nn.modules._functions.BackwardHookFunction


def _hook_functions_view(frame) -> bool:
    """Whether `frame`, Function.apply's, applies a full backward hook's BackwardHookFunction: the reference turns
    its view_as wrapper off around that one (it is its own module hooks' way in), and records the view autograd
    makes of any other custom Function's returned input (a tensor-parallel copy-to-region's)."""
    cls = frame.f_locals.get("cls")
    return isinstance(cls, type) and issubclass(cls, _BACKWARD_HOOK_FUNCTION)


class _Mode(TorchFunctionMode):
    def __init__(self, capture: "ApiCapture") -> None:
        super().__init__()
        self.capture = capture

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        cap = self.capture
        s = cap.session
        if s.busy or not s.active or (s.scope_ids is not None and s.scope_depth == 0):
            return func(*args, **kwargs)
        info = lookup(func)
        dname = getattr(_dunder, "name", None)
        if dname is not None:
            _dunder.name = None
        if info is None:
            if passes_through(func):
                # the body of a Python-level method, with the mode on: the calls inside are recorded. (Run past the
                # method's own check, so its stack holds the frame as the reference's does; a torch without the
                # skip runs a reflected operator's body, which torch's wrapper holds as __wrapped__.)
                body = getattr(func, "__wrapped__", None)
                if body is not None and not SKIPS_CHECKS:
                    with self:
                        return body(*args, **kwargs)
                return run_with_mode(self, func, args, kwargs)
            if starts_backward(func) and types_plain(types):
                # a backward pass, with the mode on (tbprobe/collector/pytorch/backward_pass.py)
                return run_with_mode(self, func, args, kwargs)
            if _writes_unversioned(func):
                out = func(*args, **kwargs)
                for t in flatten_tensors((args, kwargs)):
                    s.stats.forget(t)
                return out
            return func(*args, **kwargs)
        if func is _VIEW_AS:
            caller = sys._getframe(1)
            if caller.f_code is _FUNCTION_APPLY and _hook_functions_view(caller):
                # autograd's own view of the inputs a full backward hook's BackwardHookFunction returns: not the
                # user's call, nor one the reference sees (a copy-to-region's view it records, and so does tbprobe)
                return func(*args, **kwargs)
        if func in _STALE_OF and _stale_call(func):   # (func is hashable: the table had it)
            # the reference sees the calls inside alone (_STALE_BODIES): they are recorded, with the mode on
            return run_with_mode(self, _STALE_OF[func][0], args, kwargs)
        named = BY_CALLER.get(func)
        if named is not None:
            info = caller_named(named, info, sys._getframe(1))
        prefix, api = info
        if dname is not None:
            if DUNDER_ALIASES.get(dname) == api:
                api = dname
            elif UNRECORDED_OPERATORS.get(dname) == api:
                return func(*args, **kwargs)
        return cap.call(func, prefix, api, args, kwargs)


_DISPATCHING: Dict[Any, Any] = {}   # original -> its wrapper, made once (each wrapper is a key of the names table)
_WRAPPERS: set = set()


def _dispatching(orig: Any) -> Any:
    """A wrapper of `orig` (one of _PYTHON_FUNCTIONALS or _STALE_BODIES) that hands itself to the mode as F.relu
    does, recorded under orig's name; inside, with the mode off, orig runs as it is."""
    wrapper = _DISPATCHING.get(orig)
    if wrapper is not None:
        return wrapper

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        relevant = tuple(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        if relevant and has_torch_function(relevant):
            return handle_torch_function(wrapper, relevant, *args, **kwargs)
        return orig(*args, **kwargs)

    alias(wrapper, orig)
    _DISPATCHING[orig] = wrapper
    _WRAPPERS.add(wrapper)
    return wrapper


# the wrapper of each of _STALE -> (the original function, the code objects that hand the wrapper to the mode when
# the original is called: its own, or a dispatcher's two functions')
_STALE_OF: Dict[Any, Tuple[Any, frozenset]] = {}


def _handing_codes(orig: Any) -> frozenset:
    if orig.__code__ is _BOOLEAN_DISPATCH_CODE:
        return frozenset(c.cell_contents.__code__ for c in orig.__closure__
                         if type(c.cell_contents) is types.FunctionType)
    return frozenset((orig.__code__,))


def _stale_call(wrapper: Any) -> bool:
    """Whether the mode's handler (the caller) got `wrapper` from the original function's own torch-function check:
    the original was called through a reference taken before it was wrapped (its code hands the mode what its name
    in F's namespace holds now, the wrapper). A call through the namespace comes from the wrapper's own check.
    (Frames up from here: 1 the handler, 2 handle_torch_function, 3 the function that called it.)"""
    try:
        return (sys._getframe(3).f_code in _STALE_OF[wrapper][1]
                and sys._getframe(2).f_code is _HANDLE_CODE)
    except ValueError:
        return False


def _put_back(saved: List[Tuple[Any, str, Any]]) -> None:
    """Each (namespace, name, original) of `saved` back in place, the last wrapped first; `saved` emptied."""
    for ns, name, orig in reversed(saved):
        setattr(ns, name, orig)
    saved.clear()


def _writes_unversioned(func) -> bool:
    try:
        return func in _UNVERSIONED_WRITES
    except TypeError:    # (an unhashable callable)
        return False


_HANDLE_CODE = torch.overrides.handle_torch_function.__code__
# (the closure torch._jit_internal.boolean_dispatch makes, F.max_pool2d's; None where torch makes no such closure)
_BOOLEAN_DISPATCH_CODE = getattr(torch.nn.functional.max_pool2d, "__code__", None)


def _dispatch_frames(func) -> int:
    """How many frames above the mode's handler belong to the call itself: a function written in Python (F.relu,
    Tensor.norm) hands itself to the mode through handle_torch_function, so its own frame and that one sit
    between the mode and the caller. The reference, which wraps the function, starts the stack at the caller."""
    if type(func) is not types.FunctionType:
        return 0
    try:
        # (0: here, 1: ApiCapture.call, 2: the mode's __torch_function__)
        if sys._getframe(3).f_code is _HANDLE_CODE:
            code = func.__code__
            # F.max_pool2d and its kin, where tbprobe's wrappers are not in place (_POOL_DISPATCHERS: the user
            # replaced F's attribute): a dispatcher of torch's (boolean_dispatch, on return_indices) calls one of
            # two functions, which hands the dispatcher itself (or itself, with return_indices) to the mode: the
            # dispatcher's frame is the call's too
            if sys._getframe(4).f_code is code:
                return 3 if sys._getframe(5).f_code is _BOOLEAN_DISPATCH_CODE else 2
            if code is _BOOLEAN_DISPATCH_CODE and sys._getframe(5).f_code is code:
                return 3
    except (ValueError, AttributeError):
        pass
    return 0


def types_plain(types) -> bool:
    """Whether every tensor type taking part is torch.Tensor or Parameter (a subclass keeps its own dispatch)."""
    return all(t is torch.Tensor or t is torch.nn.Parameter for t in types)


class ApiCapture:
    def __init__(self, session: Session, risk_level: str) -> None:
        self.session = session
        self.risk_level = risk_level
        self._mode: Optional[_Mode] = None
        self._installed = False             # the dunder wrappers and optimizer hooks (see enter)
        self._saved: Dict[str, Any] = {}
        self._opt_handles: List[Any] = []
        # (namespace, name, original) of the functions wrapped there: clipping's until uninstall(), and
        # torch.nn.functional's while a step is collected (_wrap_functionals)
        self._ns_saved: List[Tuple[Any, str, Any]] = []
        self._fn_saved: List[Tuple[Any, str, Any]] = []

    # --- install / remove ------------------------------------------------------------------------------------
    # The mode is pushed by start() and popped by stop(). The dunder wrappers and the optimizer hooks stay from the
    # first start() until uninstall(), which the debugger calls when the next step is not collected and at the
    # end: setting or deleting an attribute of torch.Tensor invalidates the type's attribute cache, so doing it at
    # every start and stop cost 0.3 ms a step in a tight loop, and 3-6% of the small model's added time at L1 and
    # mix.
    # Between stop() and the next start() a wrapped dunder costs one Python call and records nothing.
    # torch.nn.functional's wrappers (_PYTHON_FUNCTIONALS, _STALE_BODIES) are in place only while a step is
    # collected (setting a module's attribute costs next to nothing): torch tests some by identity when a module is
    # built (nn.TransformerEncoderLayer's `activation is F.relu` picks its fast path and nested tensors in eval), and
    # a layer built between steps must see the function itself.
    def enter(self) -> None:
        if self._mode is not None:
            return
        if not self._installed:
            self._install()
        self._wrap_functionals()
        self._mode = _Mode(self)
        self._mode.__enter__()

    def exit(self) -> None:
        """Pop the mode and put torch.nn.functional's functions back (the other wrappers stay: see uninstall)."""
        if self._mode is None:
            return
        try:
            _pop_own(self._mode)
        except Exception as exc:  # never into the user's code
            self.session.guard.report("leaving operator capture", exc)
        self._mode = None
        _put_back(self._fn_saved)

    def _wrap_functionals(self) -> None:
        for name in (*_PYTHON_FUNCTIONALS, *_STALE):
            orig = F.__dict__.get(name)
            stale = name in _IS_STALE
            # (not the user's replacement, nor one of ours: another debugger's step is collected)
            if orig is None or lookup(orig) is None or orig in _WRAPPERS or (
                    stale and type(orig) is not types.FunctionType):
                continue
            wrapper = _dispatching(orig)
            if stale:
                _STALE_OF[wrapper] = (orig, _handing_codes(orig))
            self._fn_saved.append((F, name, orig))
            setattr(F, name, wrapper)

    def uninstall(self) -> None:
        """Pop the mode and put torch.Tensor's dunders and the global optimizer hooks back as they were."""
        self.exit()
        if not self._installed:
            return
        self._installed = False
        for dname, orig in self._saved.items():
            if orig is None:
                try:
                    delattr(torch.Tensor, dname)
                except AttributeError:
                    pass
            else:
                setattr(torch.Tensor, dname, orig)
        self._saved = {}
        for h in self._opt_handles:
            h.remove()
        self._opt_handles = []
        _put_back(self._ns_saved)

    def _install(self) -> None:
        for dname in (*DUNDER_ALIASES, *UNRECORDED_OPERATORS):
            orig = torch.Tensor.__dict__.get(dname)
            if orig is None:
                orig = getattr(torch.Tensor, dname, None)
                if orig is None:
                    continue
            self._saved[dname] = torch.Tensor.__dict__.get(dname)
            setattr(torch.Tensor, dname, _dunder_wrapper(dname, getattr(torch.Tensor, dname)))
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._opt_handles = [register_optimizer_step_pre_hook(self._opt_pre),
                             register_optimizer_step_post_hook(self._opt_post)]
        self._wrap_clipping()
        self._installed = True

    def _wrap_clipping(self) -> None:
        """Gradient clipping's calls hang under a `clip_grad` node, as the reference shows them. The functions are
        Python, not torch functions, so the mode cannot see them begin and end: they are wrapped where user code
        looks them up (torch.nn.utils and its clip_grad module), and put back by uninstall."""
        import torch.nn.utils as nn_utils
        from torch.nn.utils import clip_grad as clip_module

        wrapped: Dict[int, Any] = {}
        for ns in (nn_utils, clip_module):
            for name in _CLIPPING:
                orig = ns.__dict__.get(name)
                if orig is None or getattr(orig, "_tbprobe_clip", False):
                    continue
                if id(orig) not in wrapped:
                    wrapped[id(orig)] = self._clipping(orig)
                self._ns_saved.append((ns, name, orig))
                setattr(ns, name, wrapped[id(orig)])

    def _clipping(self, orig):
        s = self.session

        @functools.wraps(orig)
        def clip(*args, **kwargs):
            if not s.active or s.busy or s.pseudo_parent == "clip_grad":
                return orig(*args, **kwargs)
            before = s.pseudo_parent, s.pseudo_depth
            s.pseudo_parent, s.pseudo_depth = "clip_grad", len(s.fw_stack)   # (its node: with its first call's)
            try:
                return orig(*args, **kwargs)
            finally:
                s.pseudo_parent, s.pseudo_depth = before

        clip._tbprobe_clip = True
        return clip

    def _opt_pre(self, optimizer, args, kwargs) -> None:
        s = self.session
        if s.active:
            s.pseudo_parent, s.pseudo_depth = "optimizer", len(s.fw_stack)   # (its node: with its first call's)

    def _opt_post(self, optimizer, args, kwargs) -> None:
        self.session.pseudo_parent = None

    # --- one call ----------------------------------------------------------------------------------------------
    def _with_data(self, api: str, prefix: str) -> bool:
        if self.risk_level == "ALL" or prefix == "Distributed":
            return True
        risk = risk_of(api)
        if self.risk_level == "CORE":
            return risk == "core"
        return risk != "low"

    def _raised(self, name: str, parent: Optional[str], args_items: Optional[list],
                kwargs_items: Optional[dict]) -> None:
        """A call that raised keeps a record of its inputs, as in the reference: the inputs of the call that failed
        are what a user looks for (and activation checkpointing's recomputation ends by raising in a call)."""
        s = self.session
        s.busy += 1
        try:
            s.add_raised(name, parent, args_items, kwargs_items)
        except Exception as exc:
            s.guard.report("operator post-call", exc)
        finally:
            s.busy -= 1

    def call(self, func, prefix: str, api: str, args, kwargs, custom: bool = False):
        """Record one call of `func` as `<prefix>.<api>.<n>.forward` (and its backward). `custom`: a function
        the user registered (register_custom_api), recorded whatever the risk level, as one call: the torch calls
        inside it are not recorded, as the reference does it."""
        s = self.session
        # tbprobe's own torch calls (statistics, views, reads) skip the user's tensor subclasses' __torch_function__
        # and the user's modes below this one (a logging subclass saw 86 calls where its code made 2); `func`
        # itself runs outside the guard, as without the collector
        guard = _NoTorchFunction()
        guard.__enter__()
        if s.deferred:
            try:
                s.flush_deferred()
            except Exception as exc:
                s.guard.report("operator pre-call", exc)
            except BaseException:   # (a Ctrl-C: the user's, with torch functions on again)
                guard.__exit__(None, None, None)
                raise
        s.busy += 1
        args_items = kwargs_items = None     # (the inputs' items, when the call's data is recorded)
        try:
            base = f"{prefix}.{api}"
            name = api_name(prefix, api, s.counters.next(base), "forward")
            parent = s.forward_parent()
            risky = custom or self._with_data(api, prefix)
            data = risky and s.record_data(name)
            if data:
                # (a custom function's wrapper gets the call as written: only the mode's calls need rebuilding)
                rec_args, rec_kwargs = as_called(func, args, kwargs) if kwargs and not custom else (args, kwargs)
                args_items = s.items.list_items(rec_args, f"{name}.input")
                kwargs_items = {k: s.items.item_at(v, f"{name}.kwargs", k) for k, v in rec_kwargs.items()}
                s.note_consumer(name, rec_args)
            if data or (risky and s.stack_only(name)):
                s.add_stack(name, 3 + _dispatch_frames(func))
            # dropout with p=0 returns its input: no backward of its own (the reference leaves it out too)
            grad = torch.is_grad_enabled() and not (api in _DROPOUTS and _dropout_p(args, kwargs) == 0)
        except Exception as exc:
            s.guard.report("operator pre-call", exc)
            s.busy -= 1
            guard.__exit__(None, None, None)
            return func(*args, **kwargs)
        except BaseException:    # a Ctrl-C landing here: the user's, and nothing of tbprobe's left busy
            s.busy -= 1
            guard.__exit__(None, None, None)
            raise
        if not custom:
            s.busy -= 1      # (a custom function stays busy: the calls inside it are not recorded)
        guard.__exit__(None, None, None)
        try:
            out = func(*args, **kwargs)
        except BaseException:
            if custom:
                s.busy -= 1
            with _NoTorchFunction():
                self._raised(name, parent, args_items, kwargs_items)
            raise
        if not custom:
            s.busy += 1
        guard = _NoTorchFunction()
        guard.__enter__()
        try:
            if api in _BUFFER_UPDATES:
                # the running statistics it updated in place without a version bump: summarised anew next time
                for t in flatten_tensors((args, kwargs)):
                    if not t.requires_grad:
                        s.stats.forget(t)
            s.record.add_construct(name, parent)
            outs = flatten_tensors(out)
            if data:
                o = out if isinstance(out, (list, tuple)) else [out]
                entry = {"input_args": args_items, "input_kwargs": kwargs_items,
                         "output": s.items.list_items(o, f"{name}.output")}
                s.add_entry(name, entry)
                s.note_producer(name, outs)
            elif not risky:  # a construct-only node by its risk level: its backward is one too
                s.skip_data(name.replace(".forward", ".backward"))
            # (a forward the scope or list left out still has its backward asked when it runs: a range of backward
            # names keeps it)
            if grad:
                s.track_node_backward(name.replace(".forward", ".backward"), parent, outs)
        except Exception as exc:
            s.guard.report("operator post-call", exc)
        finally:
            s.busy -= 1
            guard.__exit__(None, None, None)
        return out
