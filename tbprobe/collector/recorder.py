"""Everything recorded in one step, before it is written: entries, construct, stacks, data flow, stat slots.

Framework-neutral: a tensor item is a dict in the reference's key order whose statistics are filled in later
from a slot of the adapter's statistics buffer (`fill`), so the training thread never waits for a device value.
"""
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tbprobe.collector._cstats import untrack_tree

__all__ = ["StepRecord", "StackInterner", "Spilled", "fill_items", "STAT_KEYS", "PSEUDO_PARENTS"]

STAT_KEYS = ("Max", "Min", "Mean", "Norm")
# Extra keys beyond the reference (msprobe ignores keys it does not know).
EXTRA_KEYS = ("nan_count", "inf_count", "zero_count")
PSEUDO_PARENTS = ("optimizer", "clip_grad")   # construct.json parents that are no call (the reference's)


class StackInterner:
    """Identical call stacks share one id; frames are formatted once per process."""

    def __init__(self) -> None:
        self._ids: Dict[Tuple, int] = {}
        self._by_text: Dict[Tuple[str, ...], int] = {}
        self.lines: List[List[str]] = []

    def intern(self, key: Tuple, make_lines) -> int:
        """The id of the stack `key` (any hashable); `make_lines()` formats it once. Two keys whose lines read the
        same (two call sites on one source line) share an id."""
        sid = self._ids.get(key)
        if sid is None:
            lines = make_lines()
            text = tuple(lines)
            sid = self._by_text.get(text)
            if sid is None:
                sid = self._by_text[text] = len(self.lines)
                self.lines.append(lines)
            self._ids[key] = sid
        return sid


class Spilled:
    """A tensor file's payload written already, to a staging file, while its step ran (the step held more tensor
    bytes than it may keep in memory): the writer moves it into place."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


class StepRecord:
    """The records of one step on one rank, in completion order, but for an asynchronous collective: listed where
    it was called, as the reference lists it (reserve()), its record made once it completed."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.entries: Dict[str, Optional[dict]] = {}   # (None: a place reserve() holds)
        self.construct: Dict[str, Optional[str]] = {}
        self.stack_of: Dict[str, int] = {}            # name -> interned stack id
        self.dataflow: Dict[str, Dict[str, str]] = {}  # consumer -> {input slot: producer}
        self.slots: List[Tuple[dict, int, int]] = []   # (item, stat slot, numel)
        self.checksums: List[Tuple[dict, str]] = []
        # (file name, payload, item naming it) for task tensor / save()
        self.tensor_files: List[Tuple[str, Any, dict]] = []
        self.errors = 0
        # a NaN or Inf anywhere in the entries (a statistic or a float argument): the writer then encodes with
        # the json module, which writes them as NaN/Infinity as the reference does (orjson would write null)
        self.nonfinite = False
        # health of the items filled at once by the adapter (the rest come through `slots`)
        self.host_nonfinite = 0
        self.host_max_abs = 0.0

    def __len__(self) -> int:
        return len(self.entries)

    def add_entry(self, name: str, entry: dict) -> None:
        # A finished entry is a tree of plain values: out of the cyclic GC, so keeping a step's records until the
        # writer is done does not bring on full collections (see _cstats_untrack.h)
        untrack_tree(entry)
        self.entries[name] = entry

    def reserve(self, name: str, parent: Optional[str], entry: bool) -> None:
        """Hold the place of `name`, called now and recorded later (add_entry keeps it), in construct.json and,
        with `entry`, in dump.json."""
        self.add_construct(name, parent)
        if entry:
            self.entries[name] = None

    def unreserve(self, name: str, construct: bool) -> None:
        """Give up the place reserve() held for `name`: its entry's, if none came, and with `construct` its node (and
        the pseudo node reserve() brought with it, left with no call under it)."""
        if name in self.entries and self.entries[name] is None:
            del self.entries[name]
        if construct:
            parent = self.construct.pop(name, None)
            if parent in PSEUDO_PARENTS and parent not in self.construct.values():
                del self.construct[parent]

    def add_construct(self, name: str, parent: Optional[str]) -> None:
        if name not in self.construct:
            # a pseudo node comes with the first call recorded under it, as in the reference: a foreach or fused
            # optimizer step (clip_grad_value_) whose calls are none of the recorded ones has no node of its own
            if parent in PSEUDO_PARENTS and parent not in self.construct:
                self.construct[parent] = None
            self.construct[name] = parent


def _num(v: float, is_int: bool, is_bool: bool):
    if is_bool:
        return bool(v)
    if is_int and math.isfinite(v):
        return int(v)
    return v


_KINDS: Dict[str, Tuple[bool, bool]] = {}   # dtype name -> (is_int, is_bool)


def _kind(dtype: str) -> Tuple[bool, bool]:
    kind = _KINDS.get(dtype)
    if kind is None:
        is_bool = dtype.endswith("bool") or dtype == "Bool"
        kind = _KINDS[dtype] = ("int" in dtype.lower() and not is_bool, is_bool)
    return kind


def fill_items(record: StepRecord, values: Sequence[Optional[List[float]]]) -> Dict[str, float]:
    """Write the host statistics into the items; returns the step's health figures."""
    nonfinite = record.host_nonfinite
    max_abs = record.host_max_abs
    isfinite = math.isfinite
    n_values = len(values)
    for item, slot, _numel in record.slots:
        row = values[slot] if slot < n_values else None
        if row is None:
            continue
        mx, mn, mean, norm, zeros, nans, infs = row
        is_int, is_bool = _kind(item.get("dtype", ""))
        if is_int or is_bool:
            mx = _num(mx, is_int, is_bool)
            mn = _num(mn, is_int, is_bool)
        item["Max"] = mx
        item["Min"] = mn
        item["Mean"] = mean
        item["Norm"] = norm
        item["zero_count"] = zeros
        item["nan_count"] = nans
        item["inf_count"] = infs
        if not (isfinite(mean) and isfinite(norm)):
            record.nonfinite = True      # an overflowed Mean or Norm of finite values counts only here
        if not (isfinite(row[0]) and isfinite(row[1])):
            nonfinite += 1
            record.nonfinite = True
        else:
            a = abs(row[0])
            b = abs(row[1])
            if a > max_abs:
                max_abs = a
            if b > max_abs:
                max_abs = b
    return {"nonfinite_tensors": float(nonfinite), "max_abs": max_abs, "records": float(len(record.entries))}
