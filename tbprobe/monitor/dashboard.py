"""The queries behind the Monitor dashboard, over TensorBoard's data provider (``list_scalars`` / ``read_scalars``).

A *job* is a set of runs ``<job>/rank<R>`` (one per rank) holding monitor tags; a run not named ``rank<R>`` is a
job of its own with rank 0. Every answer is sized by what the page shows: heatmap rows are paged, steps are
binned server-side into at most ``max_cols`` columns (each cell shows the value of largest magnitude in its bin,
non-finite first, so a spike or a NaN never disappears into an average), series are downsampled.

Values are JSON numbers, or the strings "nan", "inf", "-inf"; a missing cell is null.
"""
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tbprobe.monitor.series_cache import SERIES_CACHE
from tbprobe.monitor.tags import OPS, parse_anomaly_tag, parse_tag
from tbprobe.monitor.warmup import WARMER

__all__ = ["QueryError", "Job", "list_jobs", "heatmap", "series", "anomalies", "MODES"]

MODES = ("step_module", "step_rank", "module_rank")
MAX_ROWS = 2000
MAX_COLS = 2000
MAX_POINTS = 10000
MAX_SERIES = 16
_RANK_RUN = re.compile(r"^(?:(?P<job>.*)/)?rank(?P<rank>\d+)$")
_PLUGIN = "scalars"


class QueryError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Job:
    name: str
    runs: Dict[int, str] = field(default_factory=dict)  # rank -> run name
    tags: Dict[int, Dict[str, object]] = field(default_factory=dict)  # rank -> {tag: ScalarTimeSeries}

    def to_json(self) -> dict:
        metrics: Dict[str, set] = {}
        modules = set()
        n_anomaly = 0
        max_step = 0
        for tags in self.tags.values():
            for tag, ts in tags.items():
                max_step = max(max_step, int(getattr(ts, "max_step", 0) or 0))
                if parse_anomaly_tag(tag):
                    n_anomaly += 1
                    continue
                p = parse_tag(tag)
                if p:
                    metrics.setdefault(p.metric, set()).add(p.op)
                    modules.add(p.name)
        return {
            "job": self.name,
            "ranks": sorted(self.runs),
            "runs": {str(r): run for r, run in sorted(self.runs.items())},
            "metrics": {m: [op for op in OPS if op in ops] for m, ops in sorted(metrics.items())},
            "n_modules": len(modules),
            "max_step": max_step,
            "n_anomaly_series": n_anomaly,
        }


def _natural(name: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def value_json(v: float):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


# TensorBoard's list_scalars walks every stored point to find each series' last step (seconds for 2000 series of
# 1000 points). It changes only when TensorBoard reloads the log directory (every 5 s by default), so a listing
# serves the next LISTING_TTL_S seconds as is; for LISTING_STALE_S more it is still answered at once while a
# background thread builds the next one (a user clicking around never waits for the walk twice).
LISTING_TTL_S = 3.0
WARM_UP = True  # warm the series cache in the background after each new listing (tbprobe.monitor.warmup)
LISTING_STALE_S = 60.0
_listings: Dict[tuple, tuple] = {}
_refreshing: set = set()
_listing_lock = threading.Lock()


def _fetch_listing(provider, ctx, eid: str, key: tuple):
    listing = provider.list_scalars(ctx, experiment_id=eid, plugin_name=_PLUGIN)
    with _listing_lock:
        if len(_listings) >= 16 and key not in _listings:
            _listings.clear()
        _listings[key] = (time.monotonic(), listing, provider)
        _refreshing.discard(key)
    return listing


def _refresh_in_background(provider, ctx, eid: str, key: tuple) -> None:
    def run():
        try:
            _fetch_listing(provider, ctx, eid, key)
        except Exception:  # noqa: BLE001 - the next request fetches synchronously
            with _listing_lock:
                _refreshing.discard(key)

    threading.Thread(target=run, name="tbprobe-monitor-listing", daemon=True).start()


def _listing(provider, ctx, eid: str):
    key = (id(provider), eid)
    with _listing_lock:
        hit = _listings.get(key)
        if hit is not None and hit[2] is provider:
            age = time.monotonic() - hit[0]
            if age < LISTING_TTL_S:
                return hit[1]
            if age < LISTING_TTL_S + LISTING_STALE_S:
                if key not in _refreshing:
                    _refreshing.add(key)
                    _refresh_in_background(provider, ctx, eid, key)
                return hit[1]
    return _fetch_listing(provider, ctx, eid, key)


def list_jobs(provider, ctx, eid: str, warm: bool = True) -> Dict[str, Job]:
    """The monitor jobs of the provider's current listing; with ``warm``, a new listing starts the warm-up."""
    listing = _listing(provider, ctx, eid)
    jobs: Dict[str, Job] = {}
    for run, tags in listing.items():
        if not any(parse_tag(t) for t in tags):
            continue
        m = _RANK_RUN.match(run)
        name, rank = (m.group("job") or ".", int(m.group("rank"))) if m else (run, 0)
        job = jobs.setdefault(name, Job(name))
        if rank in job.runs:  # two runs claim the same rank: keep them apart as jobs of their own
            job = jobs.setdefault(run, Job(run))
            rank = 0
        job.runs[rank] = run
        job.tags[rank] = dict(tags)
    jobs = dict(sorted(jobs.items(), key=lambda kv: _natural(kv[0])))
    # a new listing: read the most-viewed series in the background before they are asked for (once per listing)
    if WARM_UP and warm:
        WARMER.schedule(provider, ctx, eid, listing, list(jobs.values()))
    return jobs


def _job(provider, ctx, eid, name: Optional[str]) -> Job:
    if not name:
        raise QueryError(400, "missing parameter 'job'")
    jobs = list_jobs(provider, ctx, eid)
    if name not in jobs:
        raise QueryError(404, f"no monitor job named {name!r}")
    return jobs[name]


def _check_metric(metric: Optional[str], op: Optional[str]) -> Tuple[str, str]:
    if not metric:
        raise QueryError(400, "missing parameter 'metric'")
    if op not in OPS:
        raise QueryError(400, f"parameter 'op' must be one of {', '.join(OPS)}")
    return metric, op


def _rank(job: Job, rank: Optional[int]) -> int:
    if rank is None:
        return min(job.runs)
    if rank not in job.runs:
        raise QueryError(404, f"job {job.name!r} has no rank {rank}")
    return rank


def _matches(name: str, needles: Sequence[str]) -> bool:
    low = name.lower()
    return not needles or any(n in low for n in needles)


def _needles(text: Optional[str]) -> List[str]:
    return [t.strip().lower() for t in (text or "").split(",") if t.strip()]


def _points(provider, ctx, eid, job: Job, pairs: Sequence[Tuple[int, str]]):
    """(rank, tag) -> (steps, values) arrays of every stored point, through the shared series cache."""
    wanted = [(job.runs[r], t, job.tags[r][t]) for r, t in pairs if t in job.tags.get(r, {})]
    got = SERIES_CACHE.read(provider, ctx, eid, wanted, MAX_POINTS, _PLUGIN)
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0))
    return {(r, t): got.get((job.runs[r], t), empty) for r, t in pairs}


def _thin(steps: np.ndarray, values: np.ndarray, points: int):
    """At most ``points`` evenly spaced points, the last one always kept."""
    if len(steps) <= points:
        return steps, values
    idx = np.unique(np.linspace(0, len(steps) - 1, points).round().astype(np.int64))
    return steps[idx], values[idx]


def _binned(rows, max_cols: int, max_step: int = 0):
    """Bin each row's (steps, values) arrays into shared step columns; a cell keeps the value of largest
    magnitude in its bin, non-finite values first."""
    filled = [s for s, _ in rows if len(s)]
    if not filled:
        return [], [[] for _ in rows]
    lo = int(min(s[0] for s in filled))
    hi = max(int(max(s[-1] for s in filled)), max_step)
    span = hi - lo + 1
    n = min(max_cols, span)
    # column i holds the steps s with floor((s - lo) * n / span) == i: from ceil(i * span / n) on
    cols = [[lo - (-(i * span) // n), lo - (-((i + 1) * span) // n) - 1] for i in range(n)]
    grid = []
    for steps, values in rows:
        cells: List[Optional[object]] = [None] * n
        if len(steps):
            idx = np.minimum((steps - lo) * n // span, n - 1)
            key = np.where(np.isfinite(values), np.abs(values), np.inf)
            order = np.lexsort((key, idx))  # by column, then by magnitude: the last of each column wins
            sidx = idx[order]
            last = np.append(sidx[1:] != sidx[:-1], True)
            chosen = order[last]
            for c, v in zip(idx[chosen].tolist(), values[chosen].tolist()):
                cells[c] = value_json(v)
        grid.append(cells)
    return cols, grid


def _max_step(job: Job, ranks: Sequence[int], tags: Sequence[str]) -> int:
    best = 0
    for r in ranks:
        for t in tags:
            ts = job.tags.get(r, {}).get(t)
            best = max(best, int(getattr(ts, "max_step", 0) or 0))
    return best


def _focus(names: List[str], focus: Optional[str], offset: int, limit: int) -> int:
    if focus and focus in names:
        return (names.index(focus) // limit) * limit
    return offset


def _modules(job: Job, ranks: Sequence[int], metric: str, op: str, needles: Sequence[str]) -> List[str]:
    names = set()
    for r in ranks:
        for tag in job.tags.get(r, {}):
            p = parse_tag(tag)
            if p and p.metric == metric and p.op == op and _matches(p.name, needles):
                names.add(p.name)
    return sorted(names, key=_natural)


def heatmap(provider, ctx, eid, *, job: str, metric: str, op: str, mode: str, rank: Optional[int] = None,
            module: Optional[str] = None, step: Optional[int] = None, filter: Optional[str] = None,
            offset: int = 0, limit: int = 200, max_cols: int = 400, focus: Optional[str] = None) -> dict:
    """One heatmap page. ``focus`` (a row name) moves the page to the one holding that row (anomaly jumps)."""
    if mode not in MODES:
        raise QueryError(400, f"parameter 'mode' must be one of {', '.join(MODES)}")
    metric, op = _check_metric(metric, op)
    if not 1 <= limit <= MAX_ROWS or offset < 0 or not 1 <= max_cols <= MAX_COLS:
        raise QueryError(400, f"need 0 <= offset, 1 <= limit <= {MAX_ROWS}, 1 <= max_cols <= {MAX_COLS}")
    j = _job(provider, ctx, eid, job)
    out = {"job": j.name, "metric": metric, "op": op, "mode": mode}
    needles = _needles(filter)
    if mode == "step_module":
        r = _rank(j, rank)
        names = _modules(j, [r], metric, op, needles)
        offset = _focus(names, focus, offset, limit)
        page = names[offset:offset + limit]
        tags = [f"{n}/{metric}_{op}" for n in page]
        data = _points(provider, ctx, eid, j, [(r, t) for t in tags])
        cols, grid = _binned([data[(r, t)] for t in tags], max_cols, _max_step(j, [r], tags))
        out.update(rank=r, rows=page, total_rows=len(names), offset=offset, cols=cols, values=grid)
    elif mode == "step_rank":
        if not module:
            raise QueryError(400, "mode step_rank needs parameter 'module'")
        tag = f"{module}/{metric}_{op}"
        ranks = [r for r in sorted(j.runs) if tag in j.tags[r]]
        if not ranks:
            raise QueryError(404, f"no rank of job {j.name!r} has {tag!r}")
        data = _points(provider, ctx, eid, j, [(r, tag) for r in ranks])
        cols, grid = _binned([data[(r, tag)] for r in ranks], max_cols, _max_step(j, ranks, [tag]))
        out.update(module=module, rows=[f"rank{r}" for r in ranks], ranks=ranks, total_rows=len(ranks), offset=0,
                   cols=cols, values=grid)
    else:
        ranks = sorted(j.runs)
        names = _modules(j, ranks, metric, op, needles)
        offset = _focus(names, focus, offset, limit)
        page = names[offset:offset + limit]
        tags = [f"{n}/{metric}_{op}" for n in page]
        data = _points(provider, ctx, eid, j, [(r, t) for t in tags for r in ranks])
        if step is None:
            step = max((int(st[-1]) for st, _ in data.values() if len(st)), default=0)
        grid = []
        for t in tags:
            row = []
            for r in ranks:
                steps, values = data[(r, t)]
                i = int(np.searchsorted(steps, step, side="right")) - 1  # the latest step <= the chosen one
                row.append(value_json(float(values[i])) if i >= 0 else None)
            grid.append(row)
        out.update(step=step, rows=page, total_rows=len(names), offset=offset, cols=[f"rank{r}" for r in ranks],
                   ranks=ranks, values=grid)
    return out


def series(provider, ctx, eid, *, job: str, specs: List[Tuple[int, str, str, str]], points: int = 1000) -> dict:
    """Line-chart data: each spec is (rank, module, metric, op)."""
    if not specs:
        raise QueryError(400, "give at least one series as s=<rank>|<module>|<metric>|<op>")
    if len(specs) > MAX_SERIES:
        raise QueryError(400, f"at most {MAX_SERIES} series per request")
    if not 1 <= points <= MAX_POINTS:
        raise QueryError(400, f"parameter 'points' must be within 1..{MAX_POINTS}")
    j = _job(provider, ctx, eid, job)
    out = []
    for rank, module, metric, op in specs:
        _check_metric(metric, op)
        r = _rank(j, rank)
        tag = f"{module}/{metric}_{op}"
        if tag not in j.tags[r]:
            raise QueryError(404, f"rank {r} of job {j.name!r} has no series {tag!r}")
        steps, values = _thin(*_points(provider, ctx, eid, j, [(r, tag)])[(r, tag)], points)
        out.append({"rank": r, "module": module, "metric": metric, "op": op, "tag": tag, "run": j.runs[r],
                    "points": [[st, value_json(v)] for st, v in zip(steps.tolist(), values.tolist())]})
    return {"job": j.name, "series": out}


def anomalies(provider, ctx, eid, *, job: str, rank: Optional[int] = None, offset: int = 0,
              limit: int = 500) -> dict:
    """Anomaly events of a job (tags ``anomaly/<rule>/<tag>``), earliest step first."""
    if not 1 <= limit <= MAX_POINTS or offset < 0:
        raise QueryError(400, f"need 0 <= offset and 1 <= limit <= {MAX_POINTS}")
    j = _job(provider, ctx, eid, job)
    ranks = [_rank(j, rank)] if rank is not None else sorted(j.runs)
    items = []
    for r in ranks:
        tags = [t for t in j.tags[r] if parse_anomaly_tag(t)]
        data = _points(provider, ctx, eid, j, [(r, t) for t in tags])
        for t in tags:
            rule, monitored = parse_anomaly_tag(t)
            p = parse_tag(monitored)
            steps, values = data[(r, t)]
            for st, v in zip(steps.tolist(), values.tolist()):
                items.append({"rank": r, "step": st, "rule": rule, "tag": monitored, "module": p.name,
                              "metric": p.metric, "op": p.op, "value": value_json(v)})
    items.sort(key=lambda a: (a["step"], a["rank"], _natural(a["tag"])))
    return {"job": j.name, "total": len(items), "offset": offset, "items": items[offset:offset + limit]}
