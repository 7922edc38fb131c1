"""The PyTorch side of one collection: builds records from hook calls into the neutral StepRecord.

Forward records are built when a call ends (inputs summarised when it begins, so in-place work is seen before the
mutation). Backward records come from tensor hooks on the call's outputs (gradients of the outputs, the
backward's "input") and on its inputs (their gradients, the backward's "output"); no autograd node is added.
"""
import linecache
import os
import sys
import weakref
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from tbprobe.collector._cstats import stack_key as _stack_key
from tbprobe.collector.config import CollectorConfig
from tbprobe.collector.filters import NameFilter
from tbprobe.collector.guard import HookGuard
from tbprobe.collector.naming import Counters
from tbprobe.collector.pytorch import later_consumers
from tbprobe.collector.pytorch.stats import StatBuffer
from tbprobe.collector.pytorch.values import ItemMaker
from tbprobe.collector.recorder import StackInterner, StepRecord

_compiling = torch.compiler.is_compiling
# tbprobe's own work in a backward pass, which runs with the operator mode on (backward_pass.py): kept out of it
_NoTorchFunction = torch._C.DisableTorchFunction

try:   # C++ node hooks, built against the installed torch (setup.py); Python's hooks otherwise
    from tbprobe.collector._cgrad import hook_node as _hook_node
    from tbprobe.collector._cgrad import hook_watched as _hook_watched
    from tbprobe.collector._cgrad import same_edge as _same_edge
except ImportError:
    _hook_node = _hook_watched = _same_edge = None

__all__ = ["Session", "BackwardTracker"]

_TBPROBE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_CODE: Dict[int, bool] = {}   # id(code object) -> whether it is tbprobe's own (left out of stacks)
_CODES: Dict[int, Any] = {}       # id(code object) -> the code object
PSEUDO_PARENTS = ("optimizer", "clip_grad")   # construct.json parents that are no call (the reference's)
_MAX_NAMES = 1 << 20              # Session._data_names is emptied past this many names (a bound for names that change)


class BackwardTracker:
    """Collects the gradients of one forward call; emits its backward record when they are all in."""

    __slots__ = ("session", "name", "out_items", "in_items", "missing_out", "missing_in", "parent", "started",
                 "began", "done", "step")

    def __init__(self, session: "Session", name: str, n_out: int, n_in: int) -> None:
        self.session = session
        self.name = name
        self.out_items: List[Any] = [None] * n_out
        self.in_items: List[Any] = [None] * n_in
        self.missing_out = n_out
        self.missing_in = n_in
        self.parent: Optional[str] = None
        self.started = False
        self.began = False     # the filters were told the module's backward began (a scope or a listed module)
        self.done = False
        self.step = session.step

    # The hooks sit on the autograd node that made each tensor, and call on_out/on_in(i, gradient): through
    # _cgrad's C++ hooks (tbprobe/collector/_cgrad.cpp), or Python's node prehooks as `partial(on_*_node, i, nr)`
    # (`nr` is the tensor's output_nr among the node's incoming gradients). A tensor without a node (a leaf) keeps
    # a tensor hook.
    def on_out(self, i: int, grad: Optional[torch.Tensor]) -> None:
        s = self.session
        if self.done or not s.active or s.step != self.step:
            return
        if s.deferred:
            s.flush_deferred()
        s.busy += 1
        try:
            with _NoTorchFunction():
                self.started = True
                if not self.began and s.filter.contextual:
                    self._begin()
                self.out_items[i] = s.items.item_at(grad, f"{self.name}.input", i) if s.record_data(self.name) \
                    else None
                self.missing_out -= 1
                self._maybe_finish()
        except Exception as exc:
            s.guard.report("backward hook", exc)
        finally:
            s.busy -= 1

    def on_in(self, i: int, grad: Optional[torch.Tensor]) -> None:
        s = self.session
        # may come before the output gradients when the module returns its input (an identity module)
        if self.done or not s.active or s.step != self.step:
            return
        if s.deferred:
            s.flush_deferred()
        s.busy += 1
        try:
            with _NoTorchFunction():
                if not self.began and s.filter.contextual:
                    self._begin()
                self.in_items[i] = s.items.item_at(grad, f"{self.name}.output", i) if s.record_data(self.name) \
                    else None
                self.missing_in -= 1
                self._maybe_finish()
        except Exception as exc:
            s.guard.report("backward hook", exc)
        finally:
            s.busy -= 1

    def _begin(self) -> None:
        """Tell the filters the module's backward began (its first gradient arrived): a scope or a listed module."""
        self.began = True
        self.session.filter.note_start(self.name)

    def on_out_node(self, i: int, nr: int, grads: Sequence[Optional[torch.Tensor]]) -> None:
        self.on_out(i, grads[nr])

    def on_in_node(self, i: int, nr: int, grads: Sequence[Optional[torch.Tensor]]) -> None:
        self.on_in(i, grads[nr])

    def _maybe_finish(self, force: bool = False) -> None:
        if self.done or not self.started or (not force and (self.missing_out > 0 or self.missing_in > 0)):
            return
        self.done = True
        if force:
            self.emit()
        else:
            # emitted when the next gradient or call comes (Session.flush_deferred): after the gradients of the
            # module's own parameters, which the engine accumulates at once after the node that sent the last
            # input gradient, as the reference records them
            self.session.deferred.append(self)

    def emit(self) -> None:
        """The backward record, and the end of the module's backward for the filters."""
        s = self.session
        s.record.add_construct(self.name, self.parent)
        if s.record_data(self.name):
            s.add_entry(self.name, {"input": self.out_items, "output": self.in_items})
        if self.began:
            s.filter.note_end(self.name)


class NodeTracker:
    """An operator's backward, as the reference records it: the autograd node(s) that made its outputs.

    The record's "input" are the gradients flowing into those nodes, its "output" the gradients they produce."""

    __slots__ = ("session", "name", "parent", "ins", "outs", "missing", "step")

    def __init__(self, session: "Session", name: str, parent: Optional[str], n_nodes: int) -> None:
        self.session = session
        self.name = name
        self.parent = parent
        self.ins: List[Any] = []
        self.outs: List[Any] = []
        self.missing = n_nodes
        self.step = session.step

    def on_share(self, grad: Optional[torch.Tensor]) -> None:
        """A call that returned a module's input as it is, inside that module: its backward is the module's share
        of that input's gradient, the same in and out (Session.track_node_backward)."""
        self.on_node((grad,), (grad,))

    def on_node(self, grad_inputs, grad_outputs) -> None:
        s = self.session
        if not s.active or s.step != self.step or self.missing <= 0:
            return
        if s.deferred:
            s.flush_deferred()
        s.busy += 1
        try:
            with _NoTorchFunction():
                data = s.record_data(self.name)
                if data:
                    items = s.items
                    base = len(self.ins)
                    self.ins.extend(items.item_at(g, f"{self.name}.input", base + i)
                                    for i, g in enumerate(grad_outputs))
                    base = len(self.outs)
                    self.outs.extend(items.item_at(g, f"{self.name}.output", base + i)
                                     for i, g in enumerate(grad_inputs))
                self.missing -= 1
                if self.missing == 0:
                    s.record.add_construct(self.name, self.parent)
                    if data:
                        s.add_entry(self.name, {"input": self.ins, "output": self.outs})
        except Exception as exc:
            s.guard.report("backward hook", exc)
        finally:
            s.busy -= 1


class _NodeHook:
    __slots__ = ("tr",)

    def __init__(self, tr: NodeTracker) -> None:
        self.tr = tr

    def __call__(self, grad_inputs, grad_outputs):
        self.tr.on_node(grad_inputs, grad_outputs)


class Session:
    """State of the collector while it runs: the current step's record, counters, stacks, statistics."""

    def __init__(self, cfg: CollectorConfig, guard: HookGuard, stacks: StackInterner) -> None:
        self.cfg = cfg
        self.guard = guard
        self.stacks = stacks
        self.filter = NameFilter(cfg)
        self.counters = Counters()
        self.stats = StatBuffer(low_precision=cfg.precision == "low", checksum=cfg.summary_mode == "md5")
        self.items = ItemMaker(cfg.task, cfg.summary_mode, self._schedule_stats, self._schedule_save,
                               cfg.tensor_list, fill=self.stats.fill, host_item=self.stats.host_item,
                               fill_row=self.stats.fill_row)
        self.want_stack = cfg.extra_info
        self.active = False
        self.busy = 0                      # >0 while tbprobe's own code runs: nothing is intercepted then
        self.step = 0
        self.record = StepRecord(0)
        self.fw_stack: List[str] = []      # names of the modules whose forward is running
        self.trackers: List[BackwardTracker] = []
        self.deferred: List[BackwardTracker] = []   # complete module backward records, to emit (flush_deferred)
        # module calls whose input gradients come from their own nodes (module_hooks): the innermost last
        self.share_calls: List[Any] = []
        self.watching = False      # a module output of this step is watched (later_consumers.py)
        self.pseudo_parent: Optional[str] = None   # "optimizer" or "clip_grad" while their work runs
        self.scope_ids: Optional[set] = None   # capture(module): ids of the module and its descendants
        self.scope_depth = 0                   # >0 while a scoped module's forward runs
        self.producers: Dict[int, tuple] = {}   # id(tensor) -> (weakref, version, producer name)
        self._data_names: Dict[str, bool] = {}

    # --- step lifecycle ----------------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.step = step
        self.record = StepRecord(step)
        self.counters.reset()
        self.filter.reset_step()
        self.stats.reset()
        self.fw_stack = []
        self.trackers = []
        self.deferred = []
        self.share_calls = []
        self.forget_watches()    # (a step begun again without its end)
        self.producers = {}
        if self.filter.contextual or len(self._data_names) > _MAX_NAMES:
            # a scope is a range of calls in execution order (and at mix a listed module keeps what runs inside it):
            # whether a name is kept can change from step to step.
            # Without one the answer depends on the name alone and is kept across steps (each name's first
            # lookup of every step cost 4-9% of small L0's added time, 2-4% at L1 and mix)
            self._data_names = {}

    def end_step(self):
        """Close pending backward records and return (record, host statistics): one device->host transfer."""
        self.flush_deferred()
        self.forget_watches()
        for t in self.trackers:
            if t.started and not t.done:
                t._maybe_finish(force=True)
        self.trackers = []
        st, rec = self.stats, self.record
        rec.host_nonfinite, rec.host_max_abs, nonfinite_values = st.host_health()
        if nonfinite_values:
            rec.nonfinite = True
        values = st.collect()
        if self.items.nonfinite_scalars:
            rec.nonfinite = True
            self.items.nonfinite_scalars = 0
        return rec, values

    # --- helpers used by the hooks -------------------------------------------------------------------------
    def record_data(self, name: str) -> bool:
        """Whether `name` gets a dump.json entry (it may still be a construct node, as FOCUS skips)."""
        keep = self._data_names.get(name)
        if keep is None:
            # a parameter gradient is backward data, as the reference's data_mode filters it
            direction = "backward" if ".backward" in name or ".parameters_grad" in name else "forward"
            keep = self.filter.keep(name, direction)
            self._data_names[name] = keep
        return keep

    def add_entry(self, name: str, entry: dict) -> None:
        """Add a forward/backward record, keeping only the inputs or outputs when data_mode asks for one side: the
        other side's keys are left out, a module's parameters going with its outputs, as the reference writes it."""
        f = self.filter
        if not f.inputs:
            for key in ("input_args", "input_kwargs", "input"):
                entry.pop(key, None)
        if not f.outputs:
            entry.pop("output", None)
            entry.pop("parameters", None)
        self.record.add_entry(name, entry)

    def skip_data(self, name: str) -> None:
        self._data_names[name] = False

    def _schedule_stats(self, item: dict, t: torch.Tensor) -> None:
        # (ItemMaker fills a CPU tensor's item at once through StatBuffer.fill; the others get a slot)
        self.record.slots.append((item, self.stats.add(t), 0))   # (numel is not needed to fill the item)

    def _schedule_save(self, item: dict, t: torch.Tensor, key: str) -> None:
        fname = f"{key}.pt"
        item["data_name"] = fname
        self.record.tensor_files.append((fname, t.detach().clone()))

    def in_module_scope(self) -> bool:
        return self.scope_ids is None or self.scope_depth > 0

    def forward_parent(self) -> Optional[str]:
        if self.pseudo_parent is not None:
            return self.pseudo_parent
        return self.fw_stack[-1] if self.fw_stack else None

    def add_stack(self, name: str, skip: int) -> None:
        if not self.want_stack:
            return
        # The key is the chain of code locations as plain ints (hashing code objects costs ~10x more), made in C
        # (_cstats_stack.h): the bytecode offset, not f_lineno, which scans the code's line table on every read;
        # lines are worked out once per unique stack. tbprobe's own frames are left out, decided once per code.
        k = _stack_key(sys._getframe(skip), _OWN_CODE, _TBPROBE_DIR, _CODES)
        self.record.stack_of[name] = self.stacks.intern(k, lambda: _format_stack(k))

    def prepare_backward(self, name: str, inputs: Sequence[Any], parent: Optional[str],
                         hook_inputs: bool = True) -> Optional[BackwardTracker]:
        """Hook the inputs' gradients before the call, so an in-place call still reports its input's gradient
        (with hook_inputs False, finish_input_shares does it when the call ends)."""
        if not torch.is_grad_enabled():
            return None
        ins = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        tr = BackwardTracker(self, name, 0, len(ins))
        # A backward node hangs under the backward twin of its forward parent (the structure the graph shows);
        # gradient arrival order cannot tell nesting apart when two hooks sit on one tensor.
        tr.parent = parent.replace(".forward.", ".backward.") if parent and parent not in PSEUDO_PARENTS else None
        # The tracker keeps no autograd node (nor tensor): a node holds its hooks, the hooks hold the tracker, and
        # the cyclic GC cannot see the node's side of that loop; a kept node would keep every step's graph, saved
        # activations included, alive (tests/collector/test_harmless.py counts them).
        if hook_inputs:
            for i, t in enumerate(ins):
                _hook_gradient(t, i, tr.on_in_node, tr.on_in)
        return tr

    def forget_watches(self) -> None:
        """The step's watched outputs are over (its end, or the collector's): torch's backward functions back."""
        if self.watching:
            self.watching = False
            later_consumers.uninstall()

    def flush_deferred(self) -> None:
        deferred, self.deferred = self.deferred, []
        for tr in deferred:
            tr.emit()

    def finish_input_shares(self, tr: BackwardTracker, start: Any, ins: Sequence[torch.Tensor],
                            outputs: Sequence[torch.Tensor], hook_consumers: Callable,
                            listeners: Optional[Dict[int, List[NodeTracker]]]) -> tuple:
        """The call's share of each input's gradient, from the nodes it made (_cgrad.hook_consumers), to the
        tracker and to the `listeners` of each input (calls inside that returned it as it is). An input none of
        the nodes sends a gradient to is unused (its gradient: null at once), or returned as it is (an identity
        module): that one gets what the consumers after the call send (the module sends it on as it is), and its
        listeners the gradient of the tensor itself. A view the call changed in place is neither (hook_consumers
        says why): null.

        Returns the positions in `outputs` (those that require grad) of the outputs whose gradient must be what
        the consumers after the call send (finish_backward): those the call's own nodes also consume, and the
        inputs it returns as they are, which other calls may have consumed before."""
        listeners = listeners or {}
        on_share = tr.on_in if not listeners else partial(_shares_to, tr, listeners)
        if _compiling():   # (dynamo would trace the C++ call; the tensors' own hooks it runs eagerly)
            counts, used = (0,) * len(ins), ()
        else:
            counts, used = hook_consumers(start, outputs, on_share)
        passed = [k for k, o in enumerate(outputs) if any(o is t for t in ins)]
        if passed and not _compiling():
            used = tuple(sorted(set(used).union(passed)))
        for i, n in enumerate(counts):
            if n > 0:
                continue
            t = ins[i]
            # (n < 0: a view the call changed in place, returned or not: its share is unknown, and the gradient of
            # the tensor as it is now would be that of the changed value; null, as for an unused input)
            if n == 0 and (_compiling() or any(o is t for o in outputs)):
                if _compiling() or not self.watch_gradient(t, tr.on_in, i):
                    _hook_gradient(t, i, tr.on_in_node, tr.on_in)
            else:
                tr.missing_in -= 1
            for node_tr in listeners.get(i, ()):
                g = t.grad_fn
                if g is not None:
                    g.register_hook(_NodeHook(node_tr))
        return used

    def finish_backward(self, tr: BackwardTracker, outs: Sequence[torch.Tensor], used: Sequence[int] = ()) -> None:
        """Hook the gradients of the call's outputs that require grad, `outs`. Those at the positions `used` get
        what the consumers after the call send (finish_input_shares says which; watch_gradient)."""
        if not outs:
            tr.done = True
            return
        tr.out_items = [None] * len(outs)
        tr.missing_out = len(outs)
        for i, t in enumerate(outs):
            if not (used and i in used and self.watch_gradient(t, tr.on_out, i)):
                _hook_gradient(t, i, tr.on_out_node, tr.on_out)
        self.trackers.append(tr)

    def watch_gradient(self, t: torch.Tensor, fn: Callable, i: int) -> bool:
        """fn(i, what the consumers made from now on send to `t`) when backward reaches t's node (_cgrad_watch.h,
        later_consumers.py); False, with nothing done, where that cannot be (no extension, no node: a leaf)."""
        if _hook_watched is None or not _hook_watched(t, fn, i):
            return False
        if not self.watching:
            self.watching = True
            later_consumers.install(self.guard.report)
        return True

    def track_node_backward(self, name: str, parent: Optional[str], outputs: Sequence[Any]) -> None:
        """An operator's backward through the autograd node(s) of its outputs. A call that returns its input as it
        is (`x.float()` on a float32 x) has its input's node, the producer's, as the reference records it at L1.
        Inside a module that took that tensor as its input, the reference has a node of its own on the module's
        inputs, so there the call's backward is the module's share of that input's gradient (finish_input_shares).
        """
        nodes: List[Any] = []
        shares: List[int] = []
        call = self.share_calls[-1] if self.share_calls else None
        for t in outputs:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                if call is not None:
                    i = next((k for k, x in enumerate(call.ins) if x is t), None)
                    # (an in-place call returns its input too, with a node of its own: that node is its backward)
                    if i is not None and _same_edge(call.start, i, t):
                        if i not in shares:
                            shares.append(i)
                        continue
                g = t.grad_fn
                if g is None or any(g is n for n in nodes):
                    continue
                nodes.append(g)
        if not nodes and not shares:
            return
        tr = NodeTracker(self, name, parent.replace(".forward.", ".backward.")
                         if parent and parent not in PSEUDO_PARENTS else None, len(nodes) + len(shares))
        for g in nodes:
            g.register_hook(_NodeHook(tr))
        if shares:
            if call.listeners is None:
                call.listeners = {}
            for i in shares:
                call.listeners.setdefault(i, []).append(tr)

    # --- data flow (tbprobe's own dataflow.json) ---------------------------------------------------------
    def note_producer(self, name: str, outputs: Sequence[Any], overwrite: bool = True) -> None:
        for t in outputs:
            if isinstance(t, torch.Tensor):
                if not overwrite:
                    p = self.producers.get(id(t))
                    # (a tensor found here has a version counter: it got in through the line below)
                    if p is not None and p[0]() is t and p[1] == t._version:
                        continue  # an operator inside the module produced it: keep the finer producer
                try:
                    self.producers[id(t)] = (weakref.ref(t), t._version, name)
                except (TypeError, RuntimeError):   # (an inference tensor has no version counter: no data flow)
                    pass

    def note_consumer(self, name: str, inputs: Sequence[Any]) -> None:
        flow = None
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor):
                p = self.producers.get(id(t))
                if p is not None and p[0]() is t and p[1] == t._version:
                    if flow is None:
                        flow = self.record.dataflow.setdefault(name, {})
                    flow[str(i)] = p[2]


def _shares_to(tr: BackwardTracker, listeners: Dict[int, List[NodeTracker]], i: int,
               grad: Optional[torch.Tensor]) -> None:
    tr.on_in(i, grad)
    for node_tr in listeners.get(i, ()):
        node_tr.on_share(grad)


def _hook_gradient(t: torch.Tensor, i: int, on_node, on_grad) -> None:
    """Call `on_grad(i, grad)` with the gradient flowing into the autograd node that made `t` (through a C++ hook
    when _cgrad is built, else `on_node(i, t.output_nr, grads)` through Python's), or through a tensor hook when
    `t` has no node (a leaf)."""
    if _hook_node is not None and not _compiling():
        # (not `t.grad_fn` first: reading it makes a Python object for the node, every time)
        if not _hook_node(t, on_grad, i):
            t.register_hook(partial(on_grad, i))
        return
    # (under torch.compile, dynamo stops tracing at `t.grad_fn` without a word, and runs the hook eagerly; it
    # would warn that it cannot trace the C++ hook_node)
    g = t.grad_fn
    if g is not None:
        if _hook_node is not None:
            _hook_node(t, on_grad, i)
        else:
            g.register_prehook(partial(on_node, i, t.output_nr))
    else:
        t.register_hook(partial(on_grad, i))


def _line_of(code: Any, lasti: int) -> int:
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def _format_stack(key: tuple) -> List[str]:
    """Lines of a stack key (id(code), bytecode offset, id(code), offset, ...), innermost first."""
    lines = []
    for i in range(0, len(key), 2):
        code = _CODES[key[i]]
        lineno = _line_of(code, key[i + 1])
        src = linecache.getline(code.co_filename, lineno).strip()
        lines.append(f"File {code.co_filename}, line {lineno}, in {code.co_name}, \n {src}")
    return lines


def flatten_tensors(value: Any, out: Optional[list] = None) -> list:
    """Tensors inside nested lists/tuples/dicts, in order."""
    if out is None:
        out = []
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            flatten_tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            flatten_tensors(v, out)
    return out
