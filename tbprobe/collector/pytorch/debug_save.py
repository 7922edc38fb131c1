"""Level debug: `debugger.save(obj, name, save_backward=True)`, as the reference records it.

Each call of a step adds `<name>.<n>.debug`: the item of `obj`, a tensor or a nested list, tuple or dict of
them and plain values. With save_backward it also adds `<name>_grad.<n>.debug`, which has the same structure
with null leaves. The gradient's item fills the leaf of each tensor that requires grad when backward reaches it.
A gradient that never comes (the tensor does not feed the loss, or was saved after the backward) stays null.
The writer puts these entries in the step's `debug.json`, as the reference does.
"""
from typing import Any, Dict, List, Optional

import torch

from tbprobe.collector.pytorch.session import Session
from tbprobe.collector.pytorch.values import field_names

__all__ = ["DebugSaver"]


class DebugSaver:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._counts: Dict[str, int] = {}     # name -> calls so far in this step
        self._handles: List[Any] = []          # this step's gradient hooks, removed when it ends

    def save(self, obj: Any, name: str, save_backward: bool) -> None:
        s = self.session
        n = self._counts.get(name, 0)
        self._counts[name] = n + 1
        key = f"{name}.{n}.debug"
        s.busy += 1
        try:
            s.record.add_entry(key, s.items.value(obj, key))
            if save_backward:
                grad_key = f"{name}_grad.{n}.debug"
                s.record.add_entry(grad_key, self._skeleton(obj, s.record.entries, grad_key, grad_key))
        finally:
            s.busy -= 1

    def end_step(self) -> None:
        """The step is over: its gradient hooks go (a tensor saved every step would gather one a step) and the
        counters start again."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._counts = {}

    def _skeleton(self, value: Any, parent: Any, slot: Any, key: str) -> Any:
        """`value`'s structure with None leaves; each tensor leaf that requires grad gets a hook that puts its
        gradient's item at parent[slot]."""
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                self._handles.append(value.register_hook(self._on_grad(parent, slot, key)))
            return None
        # a namedtuple or a dataclass: by field, as its forward item is (the gradient entry was a list, or null)
        fields = field_names(value)
        if fields is not None:
            out_f: Dict[str, Any] = {str(f): None for f in fields}
            for f in fields:
                out_f[str(f)] = self._skeleton(getattr(value, f, None), out_f, str(f), f"{key}.{f}")
            return out_f
        if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            out: List[Optional[Any]] = [None] * len(value)
            for i, v in enumerate(value):
                out[i] = self._skeleton(v, out, i, f"{key}.{i}")
            return out
        if isinstance(value, dict):
            out_d: Dict[str, Any] = {str(k): None for k in value}
            for k, v in value.items():
                out_d[str(k)] = self._skeleton(v, out_d, str(k), f"{key}.{k}")
            return out_d
        return None

    def _on_grad(self, parent: Any, slot: Any, key: str):
        s = self.session
        record = s.record

        def on_grad(grad: torch.Tensor) -> None:   # returns None: the gradient is left as it is
            if s.record is not record:     # the step was written before its backward came
                return
            s.busy += 1
            try:
                parent[slot] = s.items.value(grad, key)
            except Exception as exc:
                s.guard.report("save gradient hook", exc)
            finally:
                s.busy -= 1

        return on_grad
