"""torch.distributed collectives as `Distributed.<api>.<n>.forward` records.

torch.distributed functions are not torch functions, so the few collectives are wrapped while capture is on.
Inputs are summarised before the call, outputs after it. An asynchronous call (a work handle returned: async_op
given by keyword or position, isend/irecv, batch_isend_irecv's list) is recorded once it has completed, since only
then does the output hold the result: when its handle's wait() returns (Work.wait is wrapped while capture is
on), or, waited any other way (its future, is_completed(), DDP's communication hooks), at the collector's first
hook or call after it completed (Session.deferred), at stop() or when the step ends. It is listed where it was
called, as the reference lists it: its place in dump.json and construct.json is held from the call
(StepRecord.reserve). Listed where they completed, the sends that pipelining's schedules wait for at the step's end
fell into other groups of top-level calls than the reference's, and the graph compare left nodes unmatched. The
user gets torch's own handle back. One that has not completed when its step ends is not recorded (a warning says
so): the collector never waits for one itself, which could deadlock. A call that raises (a peer that crashed) keeps
an inputs-only record, as in the reference.
"""
import logging
from typing import Any, Callable, Dict, List, Optional

import torch

from tbprobe.collector.naming import api_name
from tbprobe.collector.pytorch.session import Session, flatten_tensors

__all__ = ["DistributedCapture", "COLLECTIVES"]

log = logging.getLogger("tbprobe.collector")

# The collectives the reference records (checked against msprobe 26.2.0, tests/collector/test_distributed.py). Not
# barrier, nor the *_object functions: the collectives they make inside (all_gather, broadcast) are recorded. Also
# all_gather_single and reduce_scatter_single, torch 2.13's names for all_gather_into_tensor and
# reduce_scatter_tensor (which it deprecates and runs through them), the ones FSDP2 calls: the reference's list
# predates them, and without them an FSDP2 step had no collective at all.
COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "gather",
    "scatter", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "all_gather_single", "reduce_scatter_single",
)

# Each collective's destination buffer (a position, and the keyword torch names it by): what it holds before the
# call is whatever the allocator left there, so its input item is null, as in the reference; a comparison of two
# runs would otherwise flag noise. isend's tensor is not changed by the call: its output item is null.
_PLACEHOLDERS = {
    "recv": (0, "tensor"), "irecv": (0, "tensor"), "all_gather": (0, "tensor_list"), "gather": (1, "gather_list"),
    "scatter": (0, "tensor"), "reduce_scatter": (0, "output"), "reduce_scatter_tensor": (0, "output"),
    "_reduce_scatter_base": (0, "output"), "all_gather_into_tensor": (0, "output_tensor"),
    "_all_gather_base": (0, "output_tensor"), "all_to_all_single": (0, "output"),
    "all_gather_single": (0, "output_tensor"), "reduce_scatter_single": (0, "output"),
    "all_to_all": (0, "output_tensor_list"),
}
_UNCHANGED = {"isend": 0}


class _Pending:
    """An asynchronous call's record, made once all its work handles have completed."""

    __slots__ = ("works", "finish", "name", "waited")

    def __init__(self, works: List[Any], finish: Callable[[], None], name: str) -> None:
        self.works = works
        self.finish = finish
        self.name = name
        self.waited: set = set()   # ids of the handles whose wait() returned

    def done(self) -> bool:
        # (a handle whose wait() returned is done, whatever it says: gloo's reduce_scatter handles tell neither by
        # is_completed(), False for good, nor by a future, which they lack)
        return all(id(w) in self.waited or _complete(w) for w in self.works)


class _Settler:
    """In Session.deferred while asynchronous calls are pending: its emit() records those complete."""

    __slots__ = ("capture",)

    def __init__(self, capture: "DistributedCapture") -> None:
        self.capture = capture

    def emit(self) -> None:
        self.capture._settle_soon()


class DistributedCapture:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._saved: Dict[str, Any] = {}
        self._pending: Dict[int, _Pending] = {}   # id(work handle) -> its call's record to make
        self._wait = None                         # Work.wait as torch has it, while it is wrapped
        # the call the main thread is in (a blocking collective: its record waits for its return), for the step
        # written while it never returns (record_in_flight)
        self._in_flight: Optional[tuple] = None
        self._late = 0                            # calls not complete when their step ended
        self._settler = _Settler(self)

    # --- asynchronous calls --------------------------------------------------------------------------------
    def _track(self, works: List[Any], finish: Callable[[], None], name: str) -> None:
        p = _Pending(works, finish, name)
        for w in works:
            self._pending[id(w)] = p
        self._list_settler()

    def _list_settler(self) -> None:
        # looked at by the next hook or call (Session.flush_deferred), so that a call waited for any other way than
        # wait() is recorded soon after it completes
        deferred = self.session.deferred
        if not any(d is self._settler for d in deferred):   # (a short list: the records waiting to be written)
            deferred.append(self._settler)

    def _settle_soon(self) -> None:
        self.settle()
        if self._pending:
            self._list_settler()

    def _completed(self, p: _Pending) -> None:
        for w in p.works:
            self._pending.pop(id(w), None)
        p.finish()
        self._idle()

    def _idle(self) -> None:
        """wait() back as torch has it once capture is off and no call is pending (exit())."""
        if not self._pending and not self._saved:
            self._unwrap_wait()

    def _on_wait(self, work: Any) -> None:
        p = self._pending.get(id(work))
        if p is not None:
            p.waited.add(id(work))
            if p.done():
                self._completed(p)

    def settle(self, step_end: bool = False) -> None:
        """Record the asynchronous calls that have completed; at the step's end, forget the others."""
        if not self._pending:
            return
        for p in self._calls():
            if p.done():
                self._completed(p)
        if step_end and self._pending:
            late = self._calls()
            self._late += len(late)
            if self._late == len(late):
                log.warning("tbprobe: %s was not complete when its step ended (not waited for): not recorded",
                            late[0].name)
            for p in late:
                self.session.record.unreserve(p.name, construct=True)
            self._pending.clear()
            self._idle()

    def _calls(self) -> List[_Pending]:
        """The pending calls, each once (batch_isend_irecv's is there under each of its handles)."""
        return list({id(p): p for p in self._pending.values()}.values())

    def _wrap_wait(self) -> None:
        import torch.distributed as dist

        work_type = getattr(dist, "Work", None)
        if work_type is None or self._wait is not None:
            return
        orig = work_type.wait
        capture = self

        def wait(work, *args: Any, **kwargs: Any) -> Any:
            result = orig(work, *args, **kwargs)
            if capture._pending:
                try:
                    capture._on_wait(work)
                except Exception as exc:
                    capture.session.guard.report("collective wait", exc)
            return result

        wait.__wrapped__ = orig
        work_type.wait = wait
        self._wait = (work_type, orig)

    def _unwrap_wait(self) -> None:
        if self._wait is not None:
            work_type, orig = self._wait
            work_type.wait = orig
            self._wait = None

    def enter(self) -> None:
        try:
            import torch.distributed as dist
        except ImportError:
            return
        if not dist.is_available() or self._saved:
            return
        c10d = getattr(dist, "distributed_c10d", None)
        self._wrap_wait()
        for name in COLLECTIVES:
            orig = getattr(dist, name, None)
            if orig is not None:
                self._saved[name] = orig
                wrapper = self._wrap(name, orig)
                setattr(dist, name, wrapper)
                # also where torch.distributed's own functions look it up: all_gather_object's all_gather,
                # broadcast_object_list's broadcast (the reference records those)
                if c10d is not None and getattr(c10d, name, None) is orig:
                    setattr(c10d, name, wrapper)

    def record_in_flight(self) -> None:
        """The collective the main thread is blocked in, recorded with its inputs as one that raised (the step is
        written while it waits: a SIGTERM's, from the watchdog's thread), once."""
        call, self._in_flight = self._in_flight, None
        if call is not None:
            _raised(self.session, *call)

    def exit(self) -> None:
        if not self._saved:
            return
        import torch.distributed as dist

        self.settle()
        # a call still pending keeps wait() wrapped until its step ends: one waited after stop() (the optimizer's
        # step waiting for the gradients' reduction, after a stop() put right after backward) is recorded then
        if not self._pending:
            self._unwrap_wait()

        c10d = getattr(dist, "distributed_c10d", None)
        for name, orig in self._saved.items():
            if c10d is not None and getattr(c10d, name, None) is getattr(dist, name, None):
                setattr(c10d, name, orig)
            setattr(dist, name, orig)
        self._saved = {}

    def _wrap(self, api: str, orig):
        s = self.session

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if s.busy or not s.active:
                return orig(*args, **kwargs)
            if s.deferred:   # the module backward records complete before the call, ahead of it (api_mode's
                s.flush_deferred()   # call), and the asynchronous calls complete since (the settler)
            s.busy += 1
            try:
                name = api_name("Distributed", api, s.counters.next(f"Distributed.{api}"), "forward")
                parent = s.forward_parent()
                keep = s.record_data(name)
                hole, hole_key = _PLACEHOLDERS.get(api, (-1, None))
                args_items = [None if i == hole else s.items.value(a, f"{name}.input.{i}")
                              for i, a in enumerate(args)] if keep else None
                kwargs_items = {k: None if k == hole_key else s.items.value(v, f"{name}.kwargs.{k}")
                                for k, v in kwargs.items()} if keep else None
                if api == "batch_isend_irecv" and keep:
                    s.forget_files(_receiving_ops_empty(args_items, kwargs_items))
                if keep or s.stack_only(name):
                    s.add_stack(name, 2)
            except Exception as exc:
                s.guard.report("collective pre-call", exc)
                s.busy -= 1
                return orig(*args, **kwargs)
            # (still busy during the call: at L1 the collective hands itself to the operator mode, by the name
            # torch.distributed's module knows it by, which is this wrapper; it must not be recorded twice)
            self._in_flight = (name, parent, args_items, kwargs_items)
            try:
                result = orig(*args, **kwargs)
            except BaseException:
                # a call that never returned (a peer that crashed: gloo's "Connection closed by peer" in a blocked
                # send) keeps its inputs, as in the reference: where the rank was stuck is what its user looks for
                if self._in_flight is not None:
                    _raised(s, name, parent, args_items, kwargs_items)
                raise
            finally:
                self._in_flight = None
                s.busy -= 1
            step = s.step

            def finish() -> None:
                if s.step != step:   # (after stop(), before step(): the step is still open)
                    return
                s.busy += 1
                try:
                    s.record.add_construct(name, parent)
                    for t in _written(args, kwargs):
                        s.stats.forget(t)
                    if keep:
                        # the output is every argument as the call left it (the reduced or received tensors with
                        # the rest), positional then keyword, as the reference writes it
                        values = list(args) + list(kwargs.values())
                        same = _UNCHANGED.get(api, -1)
                        outs = [None if i == same else s.items.value(a, f"{name}.output.{i}")
                                for i, a in enumerate(values)]
                        s.add_entry(name, {"input_args": args_items, "input_kwargs": kwargs_items,
                                                  "output": outs})
                except Exception as exc:
                    s.record.unreserve(name, construct=False)
                    s.guard.report("collective post-call", exc)
                finally:
                    s.busy -= 1

            works = _works(result)
            if works:
                s.record.reserve(name, parent, keep)
                self._track(works, finish, name)
            else:
                finish()
            return result

        wrapper.__name__ = api
        wrapper.__wrapped__ = orig
        return wrapper


def _raised(s: Session, name: str, parent: Any, args_items: Any, kwargs_items: Any) -> None:
    """The inputs-only record of a collective that raised (still busy: nothing it does is recorded)."""
    try:
        s.add_raised(name, parent, args_items, kwargs_items)
    except Exception as exc:
        s.guard.report("collective post-call", exc)


def _receiving_ops_empty(args_items: list, kwargs_items: dict) -> list:
    """batch_isend_irecv's input: an irecv P2POp's tensor is its destination buffer (what the allocator left
    there, NaN at times: a false overflow in the graph), null as recv's and irecv's own are. Returns the items
    taken out (their task tensor files are not written)."""
    removed = []
    for ops in list(args_items) + list(kwargs_items.values()):
        if isinstance(ops, list):
            for item in ops:
                if isinstance(item, dict) and item.get("op") == "irecv":
                    removed.append(item["tensor"])
                    item["tensor"] = None
    return removed


def _written(args: tuple, kwargs: dict) -> List[Any]:
    """The tensors a collective may have written through C++ (no version bump): its arguments', by position or
    keyword (`all_reduce(tensor=t)`, Megatron's `recv(tensor=buf)`), and batch_isend_irecv's P2POps'."""
    found = flatten_tensors((args, kwargs))
    for a in args:
        if isinstance(a, (list, tuple)):
            found.extend(op.tensor for op in a if isinstance(getattr(op, "tensor", None), torch.Tensor))
    return found


def _complete(work: Any) -> bool:
    """Whether an asynchronous call's result is there: its handle says so, or its future does (what DDP's
    communication hooks wait on, which gloo marks done before the handle)."""
    try:
        if work.is_completed():
            return True
        return work.get_future().done()
    except Exception:   # (a handle that cannot tell: waited for by wait() alone)
        return False


def _works(result: Any) -> List[Any]:
    """The work handles an asynchronous call returned (one, or batch_isend_irecv's list); [] for a call that
    completed. A list is copied: it is the caller's, who may empty it (send_object_list's `.pop().wait()`), and a
    call pending with no handle left counted as complete at every check after it, recorded anew each time."""
    if result is None:
        return []
    if isinstance(result, list):
        return list(result) if result and all(hasattr(w, "is_completed") for w in result) else []
    return [result] if hasattr(result, "is_completed") and hasattr(result, "wait") else []
