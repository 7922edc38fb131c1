"""A bounded cache of scalar series read through TensorBoard's data provider.

TensorBoard's data provider converts every stored point of a series on each read (about 30 µs a point), so a
heatmap page of 200 series x 1000 points costs seconds every time. Series are append-only: a series whose
``max_step`` and ``max_wall_time`` in the provider's listing have not changed has not changed, so its points are
kept here as numpy arrays (16 bytes a point) and reused by every later request, whoever sends it.
"""
import threading
from collections import OrderedDict
from typing import Dict, List, Tuple

import numpy as np

__all__ = ["SeriesCache", "SERIES_CACHE"]

Points = Tuple[np.ndarray, np.ndarray]  # (steps int64, values float64), ordered by step


class SeriesCache:
    def __init__(self, max_series: int = 4000):
        self.max_series = max_series
        self._data: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def read(self, provider, ctx, eid: str, wanted: List[Tuple[str, str, object]], downsample: int = 10000,
             plugin: str = "scalars") -> Dict[Tuple[str, str], Points]:
        """Every stored point (up to ``downsample``) of each (run, tag, listing entry) in ``wanted``; stale or
        missing series are read in one ``read_scalars`` call per run. The provider converts every stored point
        whatever ``downsample`` says, so callers read whole series once and thin them here, not there."""
        from tensorboard.data import provider as tb_provider

        out: Dict[Tuple[str, str], Points] = {}
        missing: Dict[str, List[str]] = {}
        stamps = {}
        with self._lock:
            for run, tag, ts in wanted:
                stamp = (getattr(ts, "max_step", None), getattr(ts, "max_wall_time", None))
                key = (id(provider), eid, run, tag, downsample)
                got = self._data.get(key)
                if got is not None and got[0] == stamp:
                    self._data.move_to_end(key)
                    out[(run, tag)] = got[1]
                    self.hits += 1
                else:
                    missing.setdefault(run, []).append(tag)
                    stamps[(run, tag)] = stamp
                    self.misses += 1
        for run, tags in missing.items():
            flt = tb_provider.RunTagFilter(runs=[run], tags=tags)
            data = provider.read_scalars(ctx, experiment_id=eid, plugin_name=plugin, downsample=downsample,
                                         run_tag_filter=flt).get(run, {})
            for tag in tags:
                pts = data.get(tag, [])
                steps = np.fromiter((d.step for d in pts), dtype=np.int64, count=len(pts))
                values = np.fromiter((d.value for d in pts), dtype=np.float64, count=len(pts))
                order = np.argsort(steps, kind="stable")
                arrays = (steps[order], values[order])
                out[(run, tag)] = arrays
                with self._lock:
                    self._data[(id(provider), eid, run, tag, downsample)] = (stamps[(run, tag)], arrays)
                    while len(self._data) > self.max_series:
                        self._data.popitem(last=False)
        return out


SERIES_CACHE = SeriesCache()
