"""A bounded cache of scalar series read through TensorBoard's data provider.

TensorBoard's data provider converts every stored point of a series on each read (about 30-50 µs a point, whatever
``downsample`` asks: it converts first and samples after), so a heatmap page of 200 series x 1000 points costs
seconds every time. Series are append-only: a series whose ``max_step`` and ``max_wall_time`` in the provider's
listing have not changed has not changed, so its points are kept here as numpy arrays (16 bytes a point) and
reused by every later request, whoever sends it.

Concurrency: a series being read is *claimed* (an event others wait on), so two requests, or a request and the
background warm-up (:mod:`tbprobe.monitor.warmup`), never convert the same series twice at the same time; a request
waits only for the series of its own page. While any request is reading, the warm-up waits between its small
chunks (:meth:`SeriesCache.wait_until_idle`), so it never takes the interpreter from a user who is waiting.
"""
import threading
from collections import OrderedDict
from typing import Dict, List, Tuple

import numpy as np

__all__ = ["SeriesCache", "SERIES_CACHE"]

Points = Tuple[np.ndarray, np.ndarray]  # (steps int64, values float64), ordered by step


def _stamp(ts) -> tuple:
    return (getattr(ts, "max_step", None), getattr(ts, "max_wall_time", None))


def _arrays(pts) -> Points:
    steps = np.fromiter((d.step for d in pts), dtype=np.int64, count=len(pts))
    values = np.fromiter((d.value for d in pts), dtype=np.float64, count=len(pts))
    order = np.argsort(steps, kind="stable")
    return steps[order], values[order]


class SeriesCache:
    def __init__(self, max_series: int = 4000):
        self.max_series = max_series
        self._data: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight: Dict[tuple, threading.Event] = {}  # key -> set when its reader is done
        self._readers = 0  # requests inside read(): the warm-up waits for them
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    @staticmethod
    def _key(provider, eid, run, tag, downsample) -> tuple:
        return (id(provider), eid, run, tag, downsample)

    def _fetch(self, provider, ctx, eid, plugin, downsample, claimed: Dict[tuple, tuple]) -> Dict[tuple, Points]:
        """Read the claimed series (key -> (run, tag, stamp)), one ``read_scalars`` call per run; store them and
        release the claims, whatever happens."""
        from tensorboard.data import provider as tb_provider

        by_run: Dict[str, List[str]] = {}
        for run, tag, _ in claimed.values():
            by_run.setdefault(run, []).append(tag)
        got: Dict[tuple, Points] = {}
        try:
            for run, tags in by_run.items():
                flt = tb_provider.RunTagFilter(runs=[run], tags=tags)
                data = provider.read_scalars(ctx, experiment_id=eid, plugin_name=plugin, downsample=downsample,
                                             run_tag_filter=flt).get(run, {})
                for tag in tags:
                    got[self._key(provider, eid, run, tag, downsample)] = _arrays(data.get(tag, []))
        finally:
            with self._lock:
                for key, arrays in got.items():
                    self._data[key] = (claimed[key][2], arrays)
                    self._data.move_to_end(key)
                while len(self._data) > self.max_series:
                    self._data.popitem(last=False)
                for key in claimed:
                    self._inflight.pop(key).set()
        return got

    def read(self, provider, ctx, eid: str, wanted: List[Tuple[str, str, object]], downsample: int = 10000,
             plugin: str = "scalars") -> Dict[Tuple[str, str], Points]:
        """Every stored point (up to ``downsample``) of each (run, tag, listing entry) in ``wanted``. Missing or
        stale series are read in one ``read_scalars`` call per run; series another thread is reading right now
        are waited for, not read again. The provider converts every stored point whatever ``downsample`` says,
        so callers read whole series once and thin them here, not there."""
        out: Dict[Tuple[str, str], Points] = {}
        todo = {self._key(provider, eid, run, tag, downsample): (run, tag, _stamp(ts)) for run, tag, ts in wanted}
        with self._lock:
            self._readers += 1
        try:
            first = True
            while todo:
                claimed, waits = {}, []
                with self._lock:
                    for key, (run, tag, stamp) in list(todo.items()):
                        got = self._data.get(key)
                        if got is not None and got[0] == stamp:
                            self._data.move_to_end(key)
                            out[(run, tag)] = got[1]
                            del todo[key]
                            self.hits += first
                        elif key in self._inflight:
                            waits.append(self._inflight[key])
                        else:
                            claimed[key] = todo.pop(key)
                            self._inflight[key] = threading.Event()
                            self.misses += 1
                first = False
                if claimed:
                    for key, arrays in self._fetch(provider, ctx, eid, plugin, downsample, claimed).items():
                        run, tag, _ = claimed[key]
                        out[(run, tag)] = arrays
                for ev in waits:  # another reader's chunk: short; then look again (its stamp may be older)
                    ev.wait()
        finally:
            with self._lock:
                self._readers -= 1
                self._idle.notify_all()
        return out

    def warm(self, provider, ctx, eid: str, wanted: List[Tuple[str, str, object]], downsample: int = 10000,
             plugin: str = "scalars") -> int:
        """Background read: the series of ``wanted`` that are neither cached (even stale: a request refreshes
        those when asked) nor being read; returns how many were read. Never waits for another reader."""
        claimed = {}
        with self._lock:
            for run, tag, ts in wanted:
                key = self._key(provider, eid, run, tag, downsample)
                if key not in self._data and key not in self._inflight:
                    claimed[key] = (run, tag, _stamp(ts))
                    self._inflight[key] = threading.Event()
        if claimed:
            self._fetch(provider, ctx, eid, plugin, downsample, claimed)
        return len(claimed)

    def wait_until_idle(self, timeout: float = 60.0) -> None:
        """Return once no request is reading (or after ``timeout`` seconds: a stuck request must not stop the
        warm-up forever)."""
        with self._idle:
            self._idle.wait_for(lambda: self._readers == 0, timeout=timeout)


SERIES_CACHE = SeriesCache()
