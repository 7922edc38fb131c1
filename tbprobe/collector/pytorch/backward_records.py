"""Backward records: a module's (BackwardTracker, from the gradients of its outputs and its share of its inputs')
and an operator's (NodeTracker, from the autograd node that made its outputs). The hooks that feed them are set by
Session (session.py); a tracker holds no autograd node or tensor (Session.prepare_backward says why)."""
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

import torch

if TYPE_CHECKING:
    from tbprobe.collector.pytorch.session import Session

__all__ = ["BackwardTracker", "NodeTracker", "NodeHook", "NOT_COMPUTED"]

# What _cgrad's input shares hand on for an input whose gradient the pass does not compute (Share::input_skipped)
NOT_COMPUTED = Ellipsis

# tbprobe's own work in a backward pass, which runs with the operator mode on (backward_pass.py): kept out of it
_NoTorchFunction = torch._C.DisableTorchFunction
# Which backward pass runs (-1 outside one). A record complete in one pass and reached again in a later one (the
# same graph backpropagated twice with retain_graph, a gradient penalty's autograd.grad before the backward) is
# gathered again and written over: the last pass's, as the reference keeps it, and the one the parameters'
# gradients come from.
_graph_task = torch._C._current_graph_task_id
_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


class BackwardTracker:
    """Collects the gradients of one forward call; emits its backward record when they are all in."""

    __slots__ = ("session", "name", "out_items", "in_items", "missing_out", "missing_in", "parent", "started",
                 "began", "done", "step", "task", "expect", "returned", "missing_returned", "at_end", "skipped",
                 "computed", "own_nodes")

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
        self.task = None       # the backward pass its gradients came in (_graph_task)
        self.expect = (n_out, n_in)   # how many gradients a pass brings: (outputs', inputs'), at the first
        # the outputs that are inputs returned as they are: their gradients (from the consumers after the call) come
        # together with those inputs' shares, the shares first, so the record waits for them (finish_backward)
        self.returned: frozenset = frozenset()
        self.missing_returned = 0
        self.at_end = False    # completed, if still waiting, when its backward pass ends (_end_of_pass)
        self.skipped = 0       # input shares this pass does not compute (NOT_COMPUTED)
        self.computed = 0      # and those it computes (defined or not)
        self.own_nodes = True  # some node the call made sends an input a gradient (Session.finish_input_shares)

    # The hooks sit on the autograd node that made each tensor, and call on_out/on_in(i, gradient): through
    # _cgrad's C++ hooks (tbprobe/collector/_cgrad.cpp), or Python's node prehooks as `partial(on_*_node, i, nr)`
    # (`nr` is the tensor's output_nr among the node's incoming gradients). A tensor without a node (a leaf) keeps
    # a tensor hook.
    def on_out(self, i: int, grad: Optional[torch.Tensor]) -> None:
        """The gradient of output i: the record's input i."""
        self._arrive(i, grad, True)

    def on_in(self, i: int, grad: Optional[torch.Tensor]) -> None:
        """The module's share of input i's gradient: the record's output i. It may come before the output
        gradients when the module returns its input (an identity module). NOT_COMPUTED: the pass computes no
        gradient for that input."""
        self._arrive(i, grad, False)

    def _arrive(self, i: int, grad: Optional[torch.Tensor], out: bool) -> None:
        s = self.session
        if not s.active or s.step != self.step:
            return
        if s.deferred and out:
            # (an input's share comes as its node ends, with the shares of the modules around it that the same
            # node ends: those records wait together for the node's parameter gradients)
            s.flush_deferred()
        task = _graph_task()
        if task != self.task:
            if self.task is None:
                self.expect = (self.missing_out, self.missing_in)
            elif self.started or not self.done:
                # a later backward pass: the record is gathered anew (the last pass is the one kept, as in the
                # reference), also one the earlier pass left incomplete (an output the first loss did not use)
                self._again()
            self.task = task
        if self.done:
            return
        s.busy += 1
        try:
            with _NoTorchFunction():
                if out and not self.started:
                    self.started = True
                    _open(s.bw_open, self)   # (its backward runs: Session.backward_parent)
                if not self.began and s.filter.contextual:
                    self._begin()
                item = (s.items.item_at(grad, f"{self.name}.input" if out else f"{self.name}.output", i)
                        if s.record_data(self.name) and grad is not NOT_COMPUTED else None)
                if grad is NOT_COMPUTED:
                    self.skipped += 1
                    item = None
                elif not out:
                    self.computed += 1
                if out:
                    self.out_items[i] = item
                    self.missing_out -= 1
                    if i in self.returned:
                        self.missing_returned -= 1
                else:
                    self.in_items[i] = item
                    self.missing_in -= 1
                self._maybe_finish(by_inputs=not out)
                if not self.done and not self.in_items and not self.at_end:
                    # none of its inputs needs a gradient, and some of its outputs may get none in this pass (an
                    # LSTM's h and c, when the first layer returns its output alone): complete when the pass ends,
                    # with those that came, rather than at the step's end
                    self.at_end = True
                    try:
                        _queue_callback(self._end_of_pass)
                    except RuntimeError:   # (not inside the engine)
                        pass
        except Exception as exc:
            s.guard.report("backward hook", exc)
        finally:
            s.busy -= 1

    def _end_of_pass(self) -> None:
        self.at_end = False
        s = self.session
        if self.done or not self.started or not s.active or s.step != self.step:
            return
        s.busy += 1
        try:
            with _NoTorchFunction():
                self._maybe_finish(force=True)
        except Exception as exc:   # (a final callback's error would reach the user's backward)
            s.guard.report("backward hook", exc)
        finally:
            s.busy -= 1

    def _again(self) -> None:
        """A later backward pass reaches the record: gathered anew, and written over the last if complete."""
        self.out_items = [None] * len(self.out_items)
        self.in_items = [None] * len(self.in_items)
        self.missing_out, self.missing_in = self.expect
        self.missing_returned = len(self.returned)
        self.started = self.began = self.done = False
        self.skipped = self.computed = 0
        self._close()

    def _close(self) -> None:
        """Its backward is no longer running (Session.backward_parent)."""
        try:
            self.session.bw_open.remove(self)
        except ValueError:
            pass

    def _begin(self) -> None:
        """Tell the filters the module's backward began (its first gradient arrived): a scope or a listed module."""
        self.began = True
        self.session.filter.note_start(self.name)

    def on_out_node(self, i: int, nr: int, grads: Sequence[Optional[torch.Tensor]]) -> None:
        self.on_out(i, grads[nr])

    def on_in_node(self, i: int, nr: int, grads: Sequence[Optional[torch.Tensor]]) -> None:
        self.on_in(i, grads[nr])

    def _maybe_finish(self, force: bool = False, by_inputs: bool = False) -> None:
        if self.done or not self.started:
            return
        # complete once all its gradients are in, or once the last of its inputs' shares came in this pass: the
        # outputs that get a gradient in this pass have got it by then (an LSTM's (h, c) get none when only its
        # output is used, nor does a second output computed inside that the loss does not use), as the reference's
        # full backward hook fires. An input returned as it is gets its share before its gradient as an output
        # (missing_returned). A module none of whose inputs needs a gradient waits for all its outputs'.
        if not force and (self.missing_in > 0 or (
                self.missing_out > 0 and (self.missing_returned > 0 or not by_inputs))):
            return
        self.done = True
        self._close()
        if self.skipped and not self.computed:
            # the pass computes none of its inputs' gradients (autograd.grad, backward(inputs=...) past it): no
            # record, as the reference's full backward hook never fires then
            if self.began:
                self.session.filter.note_end(self.name)
            return
        if force or not self.in_items or not self.own_nodes:
            # (none of its inputs needs a gradient: complete before its own nodes run, where the reference's full
            # backward hook fires, so before its parameters' gradients; or no node of its own sends them one: an
            # identity module, complete as the gradient passes through it)
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

    __slots__ = ("session", "name", "parent", "ins", "outs", "missing", "nodes", "step", "listed", "task")

    def __init__(self, session: "Session", name: str, parent: Optional[str]) -> None:
        self.session = session
        self.name = name
        self.parent = parent
        self.ins: List[Any] = []
        self.outs: List[Any] = []
        # the nodes (and module shares) that make the record, and those still to run in this pass: set by
        # Session.track_node_backward once its hooks are on
        self.missing = self.nodes = 0
        self.step = session.step
        self.listed = False     # in the session's partial_nodes
        self.task = None        # the backward pass its nodes ran in (_graph_task)

    def on_share(self, grad: Optional[torch.Tensor]) -> None:
        """A call that returned a module's input as it is, inside that module: its backward is the module's share
        of that input's gradient, the same in and out (Session.track_node_backward)."""
        self.on_node((grad,), (grad,))

    def on_node(self, grad_inputs, grad_outputs) -> None:
        s = self.session
        if not s.active or s.step != self.step:
            return
        task = _graph_task()
        if task != self.task:
            if self.task is not None:   # an earlier pass's record, complete or not: gathered anew (the last kept)
                self.ins, self.outs, self.missing = [], [], self.nodes
            self.task = task
        elif self.missing <= 0:
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
                    self.emit()
                elif not self.listed:
                    # some of its outputs may never get a gradient (MultiheadAttention's unused weights): the
                    # record then comes at the step's end with what came (Session.end_step), as the reference's
                    self.listed = True
                    s.partial_nodes.append(self)
        except Exception as exc:
            s.guard.report("backward hook", exc)
        finally:
            s.busy -= 1

    def emit(self) -> None:
        """The backward record, with the gradients that came (all of them, unless the step is over)."""
        self.missing = 0
        s = self.session
        s.record.add_construct(self.name, self.parent)
        if s.record_data(self.name):
            s.add_entry(self.name, {"input": self.ins, "output": self.outs})


class NodeHook:
    __slots__ = ("tr",)

    def __init__(self, tr: NodeTracker) -> None:
        self.tr = tr

    def __call__(self, grad_inputs, grad_outputs):
        self.tr.on_node(grad_inputs, grad_outputs)


def _open(bw_open: List[BackwardTracker], tr: BackwardTracker) -> None:
    """`tr`'s backward begins: it goes in the list of open module backwards (innermost last) below those of the
    modules inside it already open. Where the modules end on one autograd node (an inner module's output is the
    outer's own: Megatron's ParallelMLP returns its RowParallelLinear's), _cgrad's hooks run the outer first, but
    Python's (no extension, torch.compile) run in the order the forward ended: the inner module first. On top, the
    outer one took the calls of the inner's backward (a custom Function's collective) as its own."""
    pos = len(bw_open)
    if pos and bw_open[-1].parent is not None and bw_open[-1].parent != tr.parent:
        parents = {t.name: t.parent for t in bw_open}
        while pos and _inside(bw_open[pos - 1], tr.name, parents):
            pos -= 1
    bw_open.insert(pos, tr)


def _inside(t: BackwardTracker, outer: str, parents: dict) -> bool:
    """Whether `t`'s module ran inside `outer`'s, by the parents of the open backward records."""
    p = t.parent
    for _ in range(len(parents) + 1):
        if p == outer:
            return True
        if p is None:
            return False
        p = parents.get(p)
    return False
