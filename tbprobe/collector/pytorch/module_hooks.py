"""L0: module capture with forward pre/post hooks, tensor gradient hooks and parameter gradient hooks.

No full backward hooks: they wrap outputs in a custom autograd Function and make in-place work on a module's
output (ReLU(inplace=True), `h.mul_()`) fail. Tensor hooks leave the user's graph as it is.
"""
import logging
import sys
import weakref
from typing import AbstractSet, Any, Dict, List, Optional, Sequence, Union

import torch

from tbprobe.collector._cstats import untrack_tree
from tbprobe.collector.pytorch.own_hook import own_hook
from tbprobe.collector.pytorch.param_grads import ParamGrads, parameter_items, params_changed
from tbprobe.collector.pytorch.session import PSEUDO_PARENTS, Session, flatten_tensors

__all__ = ["ModuleHooks", "model_problem", "alias_inputs"]

log = logging.getLogger("tbprobe.collector")

_NoTorchFunction = torch._C.DisableTorchFunction
_queue_callback = torch.autograd.Variable._execution_engine.queue_callback
_compiling = torch.compiler.is_compiling
try:   # how non-reentrant activation checkpointing ends a recomputation: by raising inside the forward
    from torch.utils.checkpoint import _StopRecomputationError
except ImportError:
    _StopRecomputationError = None

try:   # a module's share of its inputs' gradients from its own nodes (tbprobe/collector/_cgrad.cpp); else views
    from tbprobe.collector._cgrad import call_start as _c_call_start
    from tbprobe.collector._cgrad import hook_consumers as _c_hook_consumers
except ImportError:
    _c_call_start = _c_hook_consumers = None


class _Call:
    # `start` and `ins` (the call's inputs that require grad): for _cgrad.hook_consumers when the call ends;
    # `listeners`: {input index: NodeTrackers of calls inside that returned that input as it is}
    # `ended`: the call was ended by _end_own_output, before forward hooks of the user's ran (_hook_module);
    # `entry`: its record then, whose parameters the post-hook adds
    __slots__ = ("name", "parent", "args_items", "kwargs_items", "inputs", "start", "ins", "listeners", "ended",
                 "entry")

    def __init__(self, name, parent, args_items, kwargs_items, inputs, start=None, ins=None):
        self.name, self.parent, self.args_items, self.kwargs_items, self.inputs = (
            name, parent, args_items, kwargs_items, inputs)
        self.start, self.ins, self.listeners, self.ended, self.entry = start, ins, None, False, None


def _module_ids(model: torch.nn.Module) -> set:
    """{id(m) for m in model.modules()}, without named_modules' names and generators."""
    seen = {id(model)}
    stack = [model]
    while stack:
        for child in stack.pop()._modules.values():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return seen


class _Hooked:
    """A model attach() hooked: itself (weakly: a model the user drops is not kept), the ids of its modules, the
    prefix of its names, its hooks (`handles`, from `first` in ModuleHooks.handles), and its modules with
    parameters, with their ParamGrads (whose parameter hooks start() checks again)."""

    __slots__ = ("ref", "module_ids", "prefix", "first", "handles", "owners")

    def __init__(self, model: torch.nn.Module, module_ids: set, prefix: str, first: int) -> None:
        self.ref = weakref.ref(model)
        self.module_ids = module_ids
        self.prefix = prefix
        self.first = first
        self.handles: List[Any] = []
        self.owners: List[tuple] = []


class ModuleHooks:
    def __init__(self, session: Session, prefix: str = "Module") -> None:
        self.session = session
        self.prefix = prefix
        self.handles: List[Any] = []
        self._calls: Dict[int, List[_Call]] = {}
        self.partial: List[ParamGrads] = []   # modules some of whose parameter gradients came in this pass
        self._models: Dict[int, _Hooked] = {}   # id(model) -> the hooks attach() put on it

    def note_partial(self, pg: ParamGrads) -> None:
        """`pg` has some of its gradients of this backward pass: the rest may never come, so what came is emitted
        when the pass ends (the engine's final callback), unless the last comes first."""
        pg.listed = True
        self.partial.append(pg)
        if len(self.partial) == 1:
            try:
                _queue_callback(self.flush_partial)
            except RuntimeError:   # not inside the engine (no pass to end): emitted at the step's end
                pass

    def flush_partial(self) -> None:
        """At a backward pass's end (or the step's): the parameter gradients that came, for each module still
        waiting for some."""
        partial, self.partial = self.partial, []
        s = self.session
        for pg in partial:
            pg.listed = False
            if not pg.pending:
                continue
            try:
                pg.emit()
            except Exception as exc:   # (a final callback's error would reach the user's backward)
                s.guard.report("parameter gradient hook", exc)

    def attach(self, model: Union[torch.nn.Module, Sequence[torch.nn.Module]]) -> None:
        """Hooks on every module of `model`, or of every model in a list or tuple (the model chunks of a virtual
        pipeline), named as the reference names them: `Module.<path>.<Class>`, `Module.<i>.<path>.<Class>` for
        the i-th model of a list."""
        before = len(self.handles)
        if isinstance(model, (list, tuple)):
            # chunks may share modules (a virtual pipeline's first and last chunks tie the word embeddings): a
            # shared module is hooked once, named in the first chunk that holds it, and the chunks of one list
            # never replace one another
            chunks = {id(m) for m in model}
            earlier: set = set()
            for i, m in enumerate(model):
                self._attach_one(m, f"{self.prefix}.{i}", chunks, earlier)
                earlier |= self._models[id(m)].module_ids
        else:
            self._attach_one(model, self.prefix)
        if len(self.handles) > before:
            _drop_code_compiled_without_hooks(self.session.guard.report)

    def _attach_one(self, model: torch.nn.Module, prefix: str, chunks: AbstractSet[int] = frozenset(),
                    earlier: AbstractSet[int] = frozenset()) -> None:
        """Hook `model`; `chunks`: the ids of the models given with it in one list, `earlier`: the ids of the
        modules of those before it in the list, hooked under their names."""
        module_ids = _module_ids(model)   # (at each start(): 0.2 us a module, a third of model.modules()'s)
        known = self._models.get(id(model))
        if known is not None and known.ref() is model:
            if known.module_ids == module_ids and known.prefix == prefix:
                # hooked at an earlier start(): parameters unfrozen, frozen or replaced since are hooked anew
                for mod, pg in known.owners:
                    if params_changed(mod, pg.sig):
                        pg.hook(mod)
                return
            # a submodule added, removed or replaced since (a new head, adapters injected after warm-up), or the
            # model given alone before and now as a chunk of a list (or the other way): the model is hooked anew,
            # whole, so that each module has the name of its path now
            self._detach_model(id(model))
        for mid, other in list(self._models.items()):
            if mid in chunks and other.ref() is not None:
                continue
            if other.ref() is None or other.module_ids & module_ids:
                # (a model gone, whose id this one may have; or one sharing modules with this one: a submodule
                # given before the whole model, or after it. Its hooks would record those modules twice, under
                # both models' names)
                if other.ref() is not None:
                    log.warning("tbprobe: start(model=...): this model shares modules with one given before; the "
                                "earlier one is no longer recorded, its modules are named as parts of this one")
                self._detach_model(mid)
        hooked = self._models[id(model)] = _Hooked(model, module_ids, prefix, len(self.handles))
        owners = hooked.owners
        scripted: List[str] = []
        for path, mod in model.named_modules():
            if id(mod) in earlier:
                continue  # a module an earlier chunk of the same list holds: hooked under that chunk's name
            if isinstance(mod, torch.jit.ScriptModule):
                # PyTorch refuses hooks on TorchScript modules (their calls run in the TorchScript interpreter):
                # such a module and everything inside it are left out, with one warning naming the outermost ones
                if not any(path == p or path.startswith(p + ".") for p in scripted):
                    scripted.append(path)
                continue
            if path == "" and mod is model:
                continue  # the root is the graph's DefaultModel, as in the reference
            if type(mod).__name__ == "FullyShardedDataParallel":
                continue  # the reference records what FSDP wraps, not the wrapper
            base = f"{prefix}.{path}.{type(mod).__name__}"
            try:
                self._hook_module(mod, base, owners)
            except Exception as exc:   # a module type that refuses hooks: left out, training goes on
                self.session.guard.report(f"hooking {base}", exc)
        if scripted:
            log.warning("tbprobe: %s TorchScript (PyTorch allows no hooks on a ScriptModule): not recorded at "
                        "module level", ", ".join(f"{prefix}.{p}" if p else "the model" for p in scripted[:5])
                        + (f" and {len(scripted) - 5} more" if len(scripted) > 5 else "")
                        + (" is" if len(scripted) == 1 else " are"))
        hooked.handles = self.handles[hooked.first:]

    def _detach_model(self, mid: int) -> None:
        hooked = self._models.pop(mid)
        for h in hooked.handles:
            h.remove()
        for _, pg in hooked.owners:
            for h in pg.handles:
                h.remove()

    def _hook_module(self, mod: torch.nn.Module, base: str, owners: Optional[List[tuple]] = None) -> None:
        """Forward pre/post hooks and parameter-gradient hooks on one module: all of them or none. A module with
        parameters joins `owners` (its model's), whose parameter hooks each start() checks (module_dump's
        window, hooked anew at each call, passes none)."""
        handles = []
        pg = ParamGrads(self, base, []) if any(p is not None for p in mod._parameters.values()) else None
        try:
            if mod._forward_hooks:
                # forward hooks registered before ours may change the output, in place too, or return another:
                # the call ends (its output's items, its backward on that output's gradient) in one more hook,
                # first, as the reference records it; what those hooks run hangs beside the module, not in it.
                # Its parameters wait for the post-hook, after them: FSDP2's post-forward reshards the
                # parameters, which are recorded as each rank's shard.
                handles.append(mod.register_forward_hook(own_hook(self._end_own_output), prepend=True))
            handles.append(mod.register_forward_pre_hook(own_hook(self._pre(base, pg)), with_kwargs=True))
            # always_call: the post-hook also runs when the forward raises, so a call the user's code survives
            # (an exception caught within the step) leaves no stale parent behind for the calls after it
            handles.append(mod.register_forward_hook(own_hook(self._post(base, pg)), with_kwargs=True,
                                                 always_call=True))
            if pg is not None:
                pg.module_id = id(mod)
                pg.hook(mod)
        except Exception:
            for h in handles + (pg.handles if pg is not None else []):
                h.remove()
            raise
        self.handles.extend(handles)
        if pg is not None and owners is not None:
            owners.append((mod, pg))

    def _end_own_output(self, mod: torch.nn.Module, args: tuple, output: Any) -> None:
        calls = self._calls.get(id(mod))
        if calls and self.session.active and not calls[-1].ended:
            call = calls[-1]
            call.ended = True
            self._end(mod, call, output, False, None, with_parameters=False)

    def begin_step(self) -> None:
        """Forget the calls a step left open (a forward that raised where no post-hook ran: under
        torch.compile, or with the collector stopped before the call ended), and the parameter gradients a step
        begun again without its end left waiting."""
        self._calls = {}
        for pg in self.partial:
            pg.listed = False
            pg.pending = {}
        self.partial = []

    def end_open_calls(self) -> None:
        """At the step's end: the calls whose forward never returned and whose post-hook never ran (a
        KeyboardInterrupt, or another BaseException: torch runs always_call hooks on an Exception alone). They get
        the record of a call that raised, inputs alone, as msprobe keeps them: the calls after them hung under a
        node that construct.json did not have, forward and backward, and a task tensor input's file had no record.
        (Those calls stay under the interrupted one, as in msprobe: nothing tells a call cut short from one that
        is still running until the step ends.)"""
        s = self.session
        open_calls = [c for calls in self._calls.values() for c in calls if not c.ended]
        self._calls = {}
        if not open_calls:
            return
        referenced = set(s.record.construct.values())
        for call in open_calls:
            s.record.add_construct(call.name, call.parent)
            if s.record_data(call.name):
                s.add_entry(call.name, {"input_args": call.args_items, "input_kwargs": call.kwargs_items})
            twin = call.name.replace(".forward.", ".backward.")
            if twin in referenced:   # (a later call's backward hangs under this call's, which never ran)
                parent = call.parent
                s.record.add_construct(twin, parent.replace(".forward.", ".backward.") if parent and
                                       parent not in PSEUDO_PARENTS else None)

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self._models = {}

    def _pre(self, base: str, pg: Optional[ParamGrads]):
        s = self.session

        def pre_hook(mod, args, kwargs):
            if not s.active or s.busy:
                return None
            if s.scope_ids is not None:
                if id(mod) not in s.scope_ids:
                    return None
                s.scope_depth += 1
            if pg is not None:
                # (after the scope's test: a module outside capture()'s has no parameters_grad either, also when
                # the backward runs after the block)
                pg.ran = s.step
            if s.deferred:
                s.flush_deferred()
            s.busy += 1
            guard = _NoTorchFunction()   # at mix, keep tbprobe's own kernels out of the operator mode
            guard.__enter__()
            try:
                idx = s.counters.next(base)
                name = f"{base}.forward.{idx}"
                if s.filter.contextual:
                    s.filter.note_start(name)
                parent = s.module_parent()
                keep = s.record_data(name)
                args_items = s.items.list_items(args, f"{name}.input") if keep else None
                kwargs_items = ({k: s.items.item_at(v, f"{name}.kwargs", k) for k, v in kwargs.items()}
                                if keep else None)
                s.note_consumer(name, args)
                s.add_stack(name, 2) if keep or s.stack_only(name) else None
                replaced = start = ins = None
                if torch.is_grad_enabled():
                    if _c_call_start is not None and not _compiling():
                        # the module's share of its inputs' gradients, read off its own nodes when it ends
                        # (_cgrad.cpp's hook_consumers): nothing between the inputs and the module
                        ins = [t for t in flatten_tensors((args, kwargs))
                               if isinstance(t, torch.Tensor) and t.requires_grad]
                        start = _c_call_start(ins)
                    else:
                        replaced = alias_inputs(args, kwargs)
                        if replaced is not None:
                            args, kwargs = replaced
                tracker = s.prepare_backward(name.replace(".forward.", ".backward."),
                                             ins if ins is not None else flatten_tensors((args, kwargs)), parent,
                                             hook_inputs=start is None)
                call = _Call(name, parent, args_items, kwargs_items, tracker, start, ins)
                self._calls.setdefault(id(mod), []).append(call)
                if start is not None:
                    s.share_calls.append(call)
                s.fw_stack.append(name)
                return replaced
            except Exception as exc:
                s.guard.report("module forward pre-hook", exc)
            finally:
                guard.__exit__(None, None, None)
                s.busy -= 1
            return None

        return pre_hook

    def _post(self, base: str, pg: Optional[ParamGrads]):
        s = self.session

        def post_hook(mod, args, kwargs, output):
            if pg is not None and s.active:
                # a lazy module's parameters exist now; others were replaced, unfrozen or frozen since start()
                # (the reference hooks the parameters at each forward): their gradients come after (between
                # collected steps start() looks again)
                try:
                    with _NoTorchFunction():   # (its property reads are tbprobe's, not the user's mode's)
                        if pg.lazy or params_changed(mod, pg.sig):
                            pg.hook(mod)
                except Exception as exc:
                    s.guard.report("module forward hook", exc)
            calls = self._calls.get(id(mod))
            if not calls or not s.active:
                return None
            call = calls.pop()
            if call.ended:
                self._after_user_hooks(mod, call, output)
                return None
            exc = sys.exc_info()[1] if output is None else None
            self._end(mod, call, output, exc is not None, exc, with_parameters=True)
            return None

        return post_hook

    def _end(self, mod: torch.nn.Module, call: _Call, output: Any, raised: bool, exc: Optional[BaseException],
             with_parameters: bool) -> None:
        """The call's end: its record (its parameters' items unless `with_parameters` is False: _after_user_hooks
        adds them) and the hooks for its backward on `output`'s gradients."""
        s = self.session
        if s.share_calls and s.share_calls[-1] is call:
            s.share_calls.pop()
        if s.scope_ids is not None and id(mod) in s.scope_ids:   # (a call begun before capture() is not counted)
            s.scope_depth -= 1
        if s.fw_stack and s.fw_stack[-1] == call.name:
            s.fw_stack.pop()
        if s.filter.contextual:
            s.filter.note_end(call.name)
        if s.busy:
            return
        if s.deferred:
            s.flush_deferred()
        s.busy += 1
        guard = _NoTorchFunction()
        guard.__enter__()
        try:
            name = call.name
            s.record.add_construct(name, call.parent)
            if raised:
                # the forward raised (see always_call): a record of its inputs alone, as the reference keeps.
                # (A forward returning None while the user's code handles an exception is taken for one that
                # raised.) A checkpoint's recomputation stopped inside the module is recorded as the
                # reference records it: with a null output and the module's parameters.
                if s.record_data(name):
                    entry = {"input_args": call.args_items, "input_kwargs": call.kwargs_items}
                    if _StopRecomputationError is not None and isinstance(exc, _StopRecomputationError):
                        entry["output"] = [None]
                        entry["parameters"] = parameter_items(s.items, name, mod)
                    s.add_entry(name, entry)
                return
            if s.record_data(name):
                items = s.items
                if isinstance(output, tuple) and hasattr(output, "_fields"):
                    out_items = items.value(output, f"{name}.output")   # a namedtuple: by field, as the reference
                else:
                    out_items = items.list_items(output if isinstance(output, (list, tuple)) else [output],
                                                 f"{name}.output")
                entry = {"input_args": call.args_items, "input_kwargs": call.kwargs_items, "output": out_items,
                         "parameters": parameter_items(items, name, mod) if with_parameters else None}
                s.add_entry(name, entry)
                if not with_parameters:
                    call.entry = entry
            outs = flatten_tensors(output)
            s.note_producer(name, outs, overwrite=False)
            if call.inputs is not None:
                grads = [t for t in outs if t.requires_grad]
                used = () if call.start is None else s.finish_input_shares(
                    call.inputs, call.start, call.ins, grads, _c_hook_consumers, call.listeners, mod)
                s.finish_backward(call.inputs, grads, used, call.ins or ())
        except Exception as exc:
            s.guard.report("module forward hook", exc)
        finally:
            guard.__exit__(None, None, None)
            s.busy -= 1

    def _after_user_hooks(self, mod: torch.nn.Module, call: _Call, output: Any) -> None:
        """After the user's forward hooks, for a call _end_own_output ended: its parameters' items, and the output
        the hooks gave noted as the module's for the data flow (its own may be changed in place, or replaced),
        unless a recorded operator in a hook made it."""
        s = self.session
        if s.busy:
            return
        s.busy += 1
        guard = _NoTorchFunction()
        guard.__enter__()
        try:
            entry, call.entry = call.entry, None
            if entry is not None and "parameters" in entry:   # (not left out by data_mode)
                entry["parameters"] = parameter_items(s.items, call.name, mod)
                untrack_tree(entry)
            if output is not None:
                s.note_producer(call.name, flatten_tensors(output), overwrite=False)
        except Exception as exc:
            s.guard.report("module forward hook", exc)
        finally:
            guard.__exit__(None, None, None)
            s.busy -= 1


def _drop_code_compiled_without_hooks(report) -> None:
    """Code that torch.compile made before the hooks existed never calls them: dynamo leaves module hooks out of
    its guards (torch._dynamo.config.skip_nnmodule_hook_guards, on by default), so a compiled model run before the
    first start() (warm-up steps, a later step window) gave an empty dump at L0, without a word. That code is
    dropped (torch._dynamo.reset_code_caches) and compiles again, with the hooks, the next time it runs."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")   # (not imported: nothing was compiled)
    if convert_frame is None:
        return
    try:
        import torch._dynamo as dynamo

        if not dynamo.config.skip_nnmodule_hook_guards or not any(
                ref() is not None for ref in convert_frame.input_codes.seen):
            return
        dynamo.reset_code_caches()
        log.warning("tbprobe: code compiled by torch.compile before the collector's module hooks were added would "
                    "not call them: it is dropped and compiles again (once) with them")
    except Exception as exc:
        report("torch.compile's code caches", exc)


def alias_inputs(args: tuple, kwargs: dict):
    """Without _cgrad's hook_consumers (not built, or under torch.compile): the module gets plain views (aliases)
    of its inputs that require grad, so a hook on the view sees this module's share of the input gradient (not the
    total over every consumer of x). A plain view, unlike the custom Function of full backward hooks, still allows
    in-place work inside the module. The values are unchanged, but the input's gradient may not be: the view sums
    the module's contributions before they join the others, so where x has other consumers and the module uses x
    twice the total is summed in another order (_cgrad.cpp's hook_consumers says more)."""
    changed = False
    new_args = list(args)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            new_args[i] = a.view_as(a)
            changed = True
    new_kwargs = kwargs
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            if new_kwargs is kwargs:
                new_kwargs = dict(kwargs)
            new_kwargs[k] = v.view_as(v)
            changed = True
    return (tuple(new_args), new_kwargs) if changed else None


def model_problem(model: Any) -> Optional[str]:
    """Why `model` cannot be start()'s model (a module, or a non-empty list or tuple of them), or None."""
    if isinstance(model, (list, tuple)):
        odd = [type(m).__name__ for m in model if not isinstance(m, torch.nn.Module)]
        if model and not odd:
            return None
        what = f"a {type(model).__name__} holding {odd[0]}" if odd else f"an empty {type(model).__name__}"
    elif isinstance(model, torch.nn.Module):
        return None
    else:
        what = type(model).__name__
    return f"start(model=...): a torch.nn.Module or a list or tuple of them (model chunks), not {what}"
