"""Background warm-up of the series cache, started as soon as the monitor's runs and tags are listed.

TensorBoard's data provider converts every stored point of a series on each read (~50 µs a point on a busy
machine: a 100-row page of 1000-point series is seconds), so the series the user is most likely to look at next
are read before they are asked for, most-viewed first:

1. the first page of rows of the view the dashboard opens on (the default metric and statistic, lowest rank),
2. the anomaly series (the list beside it),
3. the same rows on the other ranks (the module x rank and step x rank views), then the next pages,
4. the first page of every other metric and statistic,

in chunks of ``CHUNK`` series, one ``read_scalars`` call each. Bounds: the warm-up reads only series that are not
in the cache at all (a series that grew is refreshed by the request that needs it), it stops when the cache is
half full (it never evicts what users are looking at), and between chunks it waits while any request is reading.
A request never waits for the warm-up: it reads its own page's missing series itself and waits only for a chunk
of that page that is being read at that moment (see :mod:`tbprobe.monitor.series_cache`).
"""
import logging
import re
import threading
from typing import Dict, List, Optional, Tuple

from tbprobe.monitor.series_cache import SERIES_CACHE, SeriesCache
from tbprobe.monitor.tags import OPS, parse_anomaly_tag, parse_tag

__all__ = ["Warmer", "WARMER", "plan", "PAGE", "CHUNK"]

PAGE = 100  # rows a page of the dashboard asks for
CHUNK = 16  # series per provider call: a request that needs one of them waits for at most this many
_log = logging.getLogger("tbprobe.monitor")


def _natural(name: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def default_view(metrics: Dict[str, set]) -> Optional[Tuple[str, str]]:
    """The metric and statistic the dashboard opens on: ``output`` (else the first metric), ``norm`` (else the
    first statistic)."""
    if not metrics:
        return None
    metric = "output" if "output" in metrics else sorted(metrics)[0]
    ops = [op for op in OPS if op in metrics[metric]]
    return metric, ("norm" if "norm" in ops else ops[0])


def plan(jobs) -> List[Tuple[str, str, object]]:
    """(run, tag, listing entry) in the order they should be read; ``jobs`` are :class:`dashboard.Job` objects,
    the dashboard's first job first."""
    first: list = []  # first page of every job's default view and its anomalies, before any job's other pages
    rest: list = []
    for job in jobs:
        ranks = sorted(job.runs)
        names: Dict[Tuple[str, str], set] = {}  # (metric, op) -> module names
        anomaly = []
        for r in ranks:
            for tag in job.tags[r]:
                if parse_anomaly_tag(tag):
                    anomaly.append((r, tag))
                    continue
                p = parse_tag(tag)
                if p:
                    names.setdefault((p.metric, p.op), set()).add(p.name)
        metrics: Dict[str, set] = {}
        for metric, op in names:
            metrics.setdefault(metric, set()).add(op)
        view = default_view(metrics)
        if view is None:
            continue

        def entries(metric, op, rows, on_ranks, job=job):
            out = []
            for r in on_ranks:
                tags = job.tags[r]
                for n in rows:
                    tag = f"{n}/{metric}_{op}"
                    if tag in tags:
                        out.append((job.runs[r], tag, tags[tag]))
            return out

        rows = sorted(names[view], key=_natural)
        first += entries(*view, rows[:PAGE], ranks[:1])
        first += [(job.runs[r], t, job.tags[r][t]) for r, t in anomaly]
        for start in range(0, len(rows), PAGE):
            page = rows[start:start + PAGE]
            rest += entries(*view, page, ranks[1:] if start == 0 else ranks)
        for (metric, op) in sorted(names, key=lambda mo: (mo[0], OPS.index(mo[1]))):
            if (metric, op) != view:
                rest += entries(metric, op, sorted(names[(metric, op)], key=_natural)[:PAGE], ranks)
    return first + rest


class Warmer:
    """One background thread at a time; a new listing replaces the plan still pending."""

    def __init__(self, cache: SeriesCache = SERIES_CACHE, downsample: int = 10000, plugin: str = "scalars"):
        self.cache = cache
        self.downsample = downsample
        self.plugin = plugin
        self._lock = threading.Lock()
        self._pending: Optional[tuple] = None  # (provider, ctx, eid, [(run, tag, ts)])
        self._listing = None  # the listing the last plan came from
        self._thread: Optional[threading.Thread] = None
        self.read = 0  # series read by the warm-up, in this process
        self.calls = 0  # provider calls made by the warm-up

    def schedule(self, provider, ctx, eid: str, listing, jobs) -> None:
        """Plan a warm-up of ``jobs`` (from ``listing``, the provider's ``list_scalars`` answer) unless this
        listing was planned already; start the thread if none runs."""
        with self._lock:
            if listing is self._listing:
                return
            self._listing = listing
            self._pending = (provider, ctx, eid, plan(jobs))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tbprobe-monitor-warmup", daemon=True)
                self._thread.start()

    def busy(self) -> bool:
        with self._lock:
            return self._pending is not None or (self._thread is not None and self._thread.is_alive())

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the warm-up to finish (tests and benchmarks)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                job, self._pending = self._pending, None
                if job is None:
                    self._thread = None
                    return
            provider, ctx, eid, todo = job
            try:
                for i in range(0, len(todo), CHUNK):
                    with self._lock:
                        if self._pending is not None:
                            break  # a newer listing: plan again from the top
                    room = self.cache.max_series // 2 - len(self.cache)
                    if room <= 0:
                        break  # half full: what is left belongs to the requests
                    self.cache.wait_until_idle()
                    n = self.cache.warm(provider, ctx, eid, todo[i:i + min(CHUNK, room)], self.downsample,
                                        self.plugin)
                    self.read += n
                    self.calls += bool(n)
            except Exception:  # noqa: BLE001 - the warm-up is an optimisation: requests read what they need
                _log.warning("monitor warm-up stopped", exc_info=True)


WARMER = Warmer()
