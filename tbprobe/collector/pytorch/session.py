"""The PyTorch side of one collection: builds records from hook calls into the neutral StepRecord.

Forward records are built when a call ends (inputs summarised when it begins, so in-place work is seen before the
mutation). Backward records come from tensor hooks on the call's outputs (gradients of the outputs, the
backward's "input") and on its inputs (their gradients, the backward's "output"); no autograd node is added.
"""
import dataclasses
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
from tbprobe.collector.pytorch.backward_records import NOT_COMPUTED, BackwardTracker, NodeHook, NodeTracker
from tbprobe.collector.pytorch.stacks import CODES, OWN_CODE, TBPROBE_DIR, format_stack
from tbprobe.collector.pytorch.stats import StatBuffer
from tbprobe.collector.pytorch.tensor_files import data_names, tensor_file_name
from tbprobe.collector.pytorch.values import ItemMaker
from tbprobe.collector.recorder import PSEUDO_PARENTS, Spilled, StackInterner, StepRecord

_graph_task = torch._C._current_graph_task_id   # -1 outside a backward pass

_compiling = torch.compiler.is_compiling

try:   # C++ node hooks, built against the installed torch (setup.py); Python's hooks otherwise
    from tbprobe.collector._cgrad import hook_node as _hook_node
    from tbprobe.collector._cgrad import hook_nodes as _hook_nodes
    from tbprobe.collector._cgrad import hook_watched as _hook_watched
    from tbprobe.collector._cgrad import same_edge as _same_edge
except ImportError:
    _hook_node = _hook_nodes = _hook_watched = _same_edge = None

__all__ = ["Session", "flatten_tensors"]

_MAX_NAMES = 1 << 20              # Session._data_names is emptied past this many names (a bound for names that change)
HOLD_BYTES = 256 << 20            # task tensor: copies of a step's tensors kept in memory before they are spilled


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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
        self.partial_nodes: List[NodeTracker] = []   # operator backward records some of whose nodes ran
        # module calls whose input gradients come from their own nodes (module_hooks): the innermost last
        self.share_calls: List[Any] = []
        self.watching = False      # a module output of this step is watched (later_consumers.py)
        self.pseudo_parent: Optional[str] = None   # "optimizer" or "clip_grad" while their work runs
        self.pseudo_depth = 0                      # len(fw_stack) when it was set
        self.bw_open: List[BackwardTracker] = []   # module backward records begun and not complete (innermost last)
        self.scope_ids: Optional[set] = None   # capture(module): ids of the module and its descendants
        self.scope_depth = 0                   # >0 while a scoped module's forward runs
        self.producers: Dict[int, tuple] = {}   # id(tensor) -> (weakref, version, producer name)
        # id(base) -> the version at which a recorded call's output was a view of it (_base_producer)
        self.viewed_bases: Dict[int, int] = {}
        self._data_names: Dict[str, bool] = {}
        self._stack_only: set = set()    # names record_data() refused for their direction alone (stack_only)
        # task tensor: spill(step, file name, tensor) -> the path it wrote the file to (set by the debugger); past
        # HOLD_BYTES of copies held in a step, they are written out at once (see _schedule_save)
        self.spill: Optional[Callable[[int, str, Any], str]] = None
        self._held = 0

    # --- step lifecycle ----------------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.step = step
        self.busy = 0   # (none of tbprobe's own work runs between steps: nothing a Ctrl-C cut short stays busy)
        self.record = StepRecord(step)
        self._held = 0
        self.counters.reset()
        self.filter.reset_step()
        self.stats.reset()
        self.fw_stack = []
        self.trackers = []
        self.bw_open = []
        self.deferred = []
        self.partial_nodes = []
        self.share_calls = []
        self.forget_watches()    # (a step begun again without its end)
        self.producers = {}
        self.viewed_bases = {}
        if self.filter.contextual or len(self._data_names) > _MAX_NAMES:
            # a scope is a range of calls in execution order (and at mix a listed module keeps what runs inside it):
            # whether a name is kept can change from step to step.
            # Without one the answer depends on the name alone and is kept across steps (each name's first
            # lookup of every step cost 4-9% of small L0's added time, 2-4% at L1 and mix)
            self._data_names = {}
            self._stack_only = set()

    def end_step(self):
        """Close pending backward records and return (record, host statistics): one device->host transfer."""
        self.flush_deferred()
        self.forget_watches()
        for t in self.trackers:
            if t.started and not t.done:
                t._maybe_finish(force=True)
        for n in self.partial_nodes:
            if n.missing > 0:
                n.emit()
        self.partial_nodes = []
        self.trackers = []
        self.bw_open = []
        st, rec = self.stats, self.record
        rec.host_nonfinite, rec.host_max_abs, nonfinite_values = st.host_health()
        if nonfinite_values:
            rec.nonfinite = True
        try:
            values = st.collect()
        except Exception as exc:
            # (a tensor whose statistics cannot be read back): the step's records are written, their statistics null
            self.guard.report("step statistics", exc)
            st.reset()
            values = []
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
            keep, selected = self.filter.judge(name, direction)
            self._data_names[name] = keep
            if selected and not keep:
                self._stack_only.add(name)
        return keep

    def stack_only(self, name: str) -> bool:
        """Whether `name`, a call record_data() left without data, still has its stack (data_mode left it out)."""
        return name in self._stack_only

    def add_raised(self, name: str, parent: Optional[str], args_items: Optional[list],
                   kwargs_items: Optional[dict]) -> None:
        """The record of a call that raised, as the reference keeps it: its place in construct.json and its
        inputs alone (none where the filters left its data out: `args_items` None)."""
        self.record.add_construct(name, parent)
        if args_items is not None:
            self.add_entry(name, {"input_args": args_items, "input_kwargs": kwargs_items})

    def add_entry(self, name: str, entry: dict) -> None:
        """Add a forward/backward record, keeping only the inputs or outputs when data_mode asks for one side: the
        other side's keys are left out, a module's parameters going with its outputs, as the reference writes it."""
        f = self.filter
        dropped = []
        if not f.inputs:
            dropped += [entry.pop(key, None) for key in ("input_args", "input_kwargs", "input")]
        if not f.outputs:
            dropped += [entry.pop("output", None), entry.pop("parameters", None)]
        if dropped:
            self.forget_files(dropped)
        self.record.add_entry(name, entry)

    def forget_files(self, values: list) -> None:
        """The tensor files (task tensor, tensor_list) of items left out of their record are not written."""
        if not self.record.tensor_files:
            return
        names = set(data_names(values))
        if names:
            files = self.record.tensor_files
            for f in files:
                if f[0] in names and isinstance(f[1], Spilled):
                    _unlink(f[1].path)
            self.record.tensor_files = [f for f in files if f[0] not in names]

    def skip_data(self, name: str) -> None:
        self._data_names[name] = False

    def _schedule_stats(self, item: dict, t: torch.Tensor) -> None:
        # (ItemMaker fills a CPU tensor's item at once through StatBuffer.fill; the others get a slot)
        self.record.slots.append((item, self.stats.add(t), 0))   # (numel is not needed to fill the item)

    def _schedule_save(self, item: dict, t: torch.Tensor, key: str) -> None:
        fname = tensor_file_name(key)
        item["data_name"] = fname
        t = t.detach()
        if type(t) is not torch.Tensor:
            # a subclass's file holds a plain tensor: one a reader loads without the user's class (and one that
            # pickles: a class defined in a function does not)
            try:
                t = t.as_subclass(torch.Tensor)
            except Exception:   # (a wrapper subclass without storage: saved as it is)
                pass
        copy = t.clone()
        self.record.tensor_files.append((fname, copy, item))
        if self.spill is not None:
            # The copies wait for the step's end, where the writer writes them: a big model's step held all its
            # tensors twice (1.8 GB a step on a d=512 GPT; three steps' worth with async_dump). Past HOLD_BYTES
            # they are written out now, as the reference writes each as it goes, and moved into place after.
            self._held += copy.numel() * copy.element_size()
            if self._held > HOLD_BYTES:
                self._held = 0
                files = self.record.tensor_files
                step = self.record.step
                try:
                    for i, (name, payload, it) in enumerate(files):
                        if not isinstance(payload, Spilled):
                            files[i] = (name, Spilled(self.spill(step, name, payload)), it)
                except Exception as exc:   # (a full disk: the step's end says so, and stops collection)
                    self.spill = None
                    self.guard.report("writing tensor files ahead", exc)

    def in_module_scope(self) -> bool:
        return self.scope_ids is None or self.scope_depth > 0

    def forward_parent(self) -> Optional[str]:
        """The parent of a call made now: the innermost module running its forward; inside the optimizer's step
        (or clip_grad) that pseudo node, unless a module the step runs holds the call (LBFGS's closure); in a
        backward pass, the innermost module running its backward (a custom Function's backward doing an
        all_reduce, as tensor-parallel layers do), as the reference's module stack has it."""
        fw = self.fw_stack
        if self.pseudo_parent is not None and len(fw) <= self.pseudo_depth:
            return self.pseudo_parent
        if fw:
            return fw[-1]
        return self.backward_parent()

    def module_parent(self) -> Optional[str]:
        """The parent of a module's call: the innermost module running, forward or backward (not the optimizer's
        pseudo node: a closure's forward is the model's)."""
        return self.fw_stack[-1] if self.fw_stack else self.backward_parent()

    def backward_parent(self) -> Optional[str]:
        if self.bw_open and _graph_task() != -1:
            return self.bw_open[-1].name
        return None

    def add_stack(self, name: str, skip: int) -> None:
        if not self.want_stack:
            return
        # The key is the chain of code locations as plain ints (hashing code objects costs ~10x more), made in C
        # (_cstats_stack.h): the bytecode offset, not f_lineno, which scans the code's line table on every read;
        # lines are worked out once per unique stack. tbprobe's own frames are left out, decided once per code.
        k = _stack_key(sys._getframe(skip), OWN_CODE, TBPROBE_DIR, CODES)
        self.record.stack_of[name] = self.stacks.intern(k, lambda: format_stack(k))

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
        # activations included, alive (tests/collector/test_bounded_cost.py counts them).
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
                            listeners: Optional[Dict[int, List[NodeTracker]]], owner: Any = None) -> tuple:
        """The call's share of each input's gradient, from the nodes it made (_cgrad.hook_consumers), to the
        tracker and to the `listeners` of each input (calls inside that returned it as it is). An input none of
        the nodes sends a gradient to is unused (its gradient: null at once), or returned as it is (an identity
        module): that one gets what the consumers after the call send (the module sends it on as it is), and its
        listeners the gradient of the tensor itself. A view the call changed in place is neither (hook_consumers
        says why): null.

        Returns the positions in `outputs` (those that require grad) of the outputs whose gradient must be what
        the consumers after the call send (finish_backward): those the call's own nodes also consume, and the
        inputs it returns as they are, which other calls may have consumed before (hook_consumers finds both).
        The call's nodes are those its outputs reach, and those the tensor attributes of `owner` (the module) and of
        the modules inside it reach: a value kept rather than returned (an MoE router's `self.aux_loss`, or
        `self.inner.aux_loss`, which the caller adds to the loss) is part of its share, as in msprobe's full
        backward hook."""
        listeners = listeners or {}
        on_share = tr.on_in if not listeners else partial(_shares_to, tr, listeners)
        if _compiling():   # (dynamo would trace the C++ call; the tensors' own hooks it runs eagerly)
            counts, used = (0,) * len(ins), ()
        else:
            counts, used = hook_consumers(start, outputs, on_share, owner)
        # (no node of the call's sends an input a gradient, and it returns an input as it came: an identity
        # module, whose record has no parameter gradients to wait for)
        tr.own_nodes = any(n > 0 for n in counts) or not any(o is t for t in ins for o in outputs)
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
                    g.register_hook(NodeHook(node_tr))
        return used

    def finish_backward(self, tr: BackwardTracker, outs: Sequence[torch.Tensor], used: Sequence[int] = (),
                        ins: Sequence[torch.Tensor] = ()) -> None:
        """Hook the gradients of the call's outputs that require grad, `outs`. Those at the positions `used` get
        what the consumers after the call send (finish_input_shares says which; watch_gradient); those of them
        that are inputs `ins` returned as they are, the record waits for."""
        if not outs:
            tr.done = True
            return
        tr.out_items = [None] * len(outs)
        tr.missing_out = len(outs)
        tr.returned = frozenset(i for i in used if any(outs[i] is t for t in ins))
        tr.missing_returned = len(tr.returned)
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
        hooked: List[Any] = []     # the outputs whose nodes make the call's backward
        shares: List[int] = []
        call = self.share_calls[-1] if self.share_calls else None
        # the first tensor output alone, as the reference hooks it: where that one needs no gradient there is no
        # backward record (broadcast_tensors of an int index and float logits, as Categorical.log_prob calls it,
        # got the record of its second output's node: the producer's, another call's gradients)
        t = next((t for t in outputs if isinstance(t, torch.Tensor)), None)
        if t is not None and t.requires_grad:
            i = next((k for k, x in enumerate(call.ins) if x is t), None) if call is not None else None
            # (an in-place call returns its input too, with a node of its own: that node is its backward)
            if i is not None and _same_edge(call.start, i, t):
                shares.append(i)
            else:
                hooked.append(t)
        # (with one node per output, tensor_split's, MultiheadAttention's output and weights, the record once
        # joined every node's gradients in the order the engine reached them: its input.0 was not output 0's)
        if not hooked and not shares:
            return
        tr = NodeTracker(self, name, parent.replace(".forward.", ".backward.")
                         if parent and parent not in PSEUDO_PARENTS else None)
        count = len(shares)
        if hooked:
            if _hook_nodes is not None and not _compiling():
                # each distinct node once, from C++ (_cgrad.hook_nodes; Dynamo traces only Python's); a leaf has none
                count += _hook_nodes(hooked, tr.on_node)
            else:
                nodes: List[Any] = []
                for t in hooked:
                    g = t.grad_fn
                    if g is not None and not any(g is n for n in nodes):
                        nodes.append(g)
                for g in nodes:
                    g.register_hook(NodeHook(tr))
                count += len(nodes)
        tr.missing = tr.nodes = count
        if not count:
            return
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
                    base = t._base
                    if base is not None:
                        self.viewed_bases[id(base)] = t._version
                except (TypeError, RuntimeError):   # (an inference tensor has no version counter: no data flow)
                    pass

    def note_consumer(self, name: str, inputs: Sequence[Any]) -> None:
        """dataflow.json's links of one call: each positional input a recorded call produced (at the version it
        left), by its slot; a list or tuple of tensors (torch.cat's) by `<i>.<j>`, as its items are named."""
        flow = None
        producers = self.producers
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor):
                slots = ((str(i), t),)
            elif isinstance(t, (list, tuple)) and producers:
                slots = ((f"{i}.{j}", u) for j, u in enumerate(t) if isinstance(u, torch.Tensor))
            else:
                continue
            for slot, u in slots:
                p = producers.get(id(u))
                if p is None or p[0]() is not u or p[1] != u._version:
                    p = _base_producer(producers, self.viewed_bases, u)
                    if p is None:
                        continue
                if flow is None:
                    flow = self.record.dataflow.setdefault(name, {})
                flow[slot] = p[2]


def _base_producer(producers: Dict[int, tuple], viewed_bases: Dict[int, int], t: torch.Tensor) -> Optional[tuple]:
    """The producer of the tensor `t` is a view of, where no recorded call made `t` itself: the view autograd
    makes of an input a custom Function returns as it is (a tensor-parallel copy-to-region's, seen by no hook at
    L1, construct-only at mix), or one an unrecorded call made (x.view at mix). A view shares its base's version
    counter, so the base's recorded version says that nothing wrote to either since. None where a recorded call's
    output is a view of that base too (`z.narrow(...)` recorded, then `.view(-1)` of it): torch keeps the first
    tensor of a chain of views alone, so `t` may be a view of that call's output, and the base's producer would
    skip it. No link is better than a wrong one."""
    base = t._base      # (None for a tensor that is no view: a parameter, a copy; the common miss costs this read)
    if base is None or viewed_bases.get(id(base)) == t._version:
        return None
    p = producers.get(id(base))
    if p is not None and p[0]() is base and p[1] == t._version:
        return p
    return None


def _shares_to(tr: BackwardTracker, listeners: Dict[int, List[NodeTracker]], i: int,
               grad: Optional[torch.Tensor]) -> None:
    tr.on_in(i, grad)
    if grad is NOT_COMPUTED:   # (no record for them either, as for the module)
        return
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


def flatten_tensors(value: Any, out: Optional[list] = None) -> list:
    """Tensors inside nested lists/tuples/dicts/dataclasses, in order."""
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
    elif value is not None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):     # (as values.py writes one: by field)
            flatten_tensors(getattr(value, f.name, None), out)
    return out
