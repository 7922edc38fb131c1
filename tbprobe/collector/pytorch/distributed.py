"""torch.distributed collectives as `Distributed.<api>.<n>.forward` records.

torch.distributed functions are not torch functions, so the few collectives are wrapped while capture is on.
Inputs are summarised before the call, outputs after it; an asynchronous call (async_op=True) is recorded when
its work handle's wait() returns, since only then does the output hold the result.
"""
from typing import Any, Dict

from tbprobe.collector.naming import api_name
from tbprobe.collector.pytorch.session import Session, flatten_tensors

__all__ = ["DistributedCapture", "COLLECTIVES"]

# The collectives the reference records (checked against msprobe 26.2.0, tests/collector/test_distributed.py). Not
# barrier, nor the *_object functions: the collectives they make inside (all_gather, broadcast) are recorded.
COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "gather",
    "scatter", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "send", "recv", "isend", "irecv", "batch_isend_irecv",
)

# Each collective's destination buffer (a position, and the keyword torch names it by): what it holds before the
# call is whatever the allocator left there, so its input item is null, as in the reference; a comparison of two
# runs would otherwise flag noise. isend's tensor is not changed by the call: its output item is null.
_PLACEHOLDERS = {
    "recv": (0, "tensor"), "irecv": (0, "tensor"), "all_gather": (0, "tensor_list"), "gather": (1, "gather_list"),
    "scatter": (0, "tensor"), "reduce_scatter": (0, "output"), "reduce_scatter_tensor": (0, "output"),
    "_reduce_scatter_base": (0, "output"), "all_gather_into_tensor": (0, "output_tensor"),
    "_all_gather_base": (0, "output_tensor"), "all_to_all_single": (0, "output"),
    "all_to_all": (0, "output_tensor_list"),
}
_UNCHANGED = {"isend": 0}


class _Work:
    """Stands in for a work handle: records the call once wait() has returned."""

    def __init__(self, work: Any, finish) -> None:
        self._work = work
        self._finish = finish

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()
        return result

    def __getattr__(self, item: str) -> Any:
        return getattr(self._work, item)


class DistributedCapture:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._saved: Dict[str, Any] = {}

    def enter(self) -> None:
        try:
            import torch.distributed as dist
        except ImportError:
            return
        if not dist.is_available() or self._saved:
            return
        c10d = getattr(dist, "distributed_c10d", None)
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

    def exit(self) -> None:
        if not self._saved:
            return
        import torch.distributed as dist

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
                if keep:
                    s.add_stack(name, 2)
            except Exception as exc:
                s.guard.report("collective pre-call", exc)
                s.busy -= 1
                return orig(*args, **kwargs)
            # (still busy during the call: at L1 the collective hands itself to the operator mode, by the name
            # torch.distributed's module knows it by, which is this wrapper; it must not be recorded twice)
            try:
                result = orig(*args, **kwargs)
            finally:
                s.busy -= 1
            step = s.step

            def finish() -> None:
                if not s.active or s.step != step:
                    return
                s.busy += 1
                try:
                    s.record.add_construct(name, parent)
                    for t in flatten_tensors(args):
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
                    s.guard.report("collective post-call", exc)
                finally:
                    s.busy -= 1

            if kwargs.get("async_op") or api in ("isend", "irecv"):
                if result is not None and hasattr(result, "wait"):
                    return _Work(result, finish)
            finish()
            return result

        wrapper.__name__ = api
        wrapper.__wrapped__ = orig
        return wrapper
