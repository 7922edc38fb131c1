"""The background warm-up of the Monitor dashboard's series cache, on real event files read through TensorBoard's
own data provider: it reads the most-viewed series first, the answers are the same with or without it, a request
never waits for the whole warm-up, and no series is converted twice. Timing-free: provider calls are counted."""
import json
import threading

import numpy as np
import pytest
from tensorboard.backend.event_processing import data_provider as tb_data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.context import RequestContext
from tensorboard.plugins import base_plugin
from werkzeug import test as wtest

from tbprobe.monitor import dashboard, warmup
from tbprobe.monitor.config import AlertRule
from tbprobe.monitor.series_cache import SeriesCache
from tbprobe.monitor.writer import MonitorWriter
from tbprobe.tb_plugin.monitor_routes import get_routes

MODULES = [f"layers.{i}" for i in range(12)] + ["head"]
ROWS = sorted(MODULES, key=dashboard._natural)
STEPS = 30
WARM = "tbprobe-monitor-warmup"
CTX = RequestContext()


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("warm")
    for rank in (0, 1):
        w = MonitorWriter(str(logdir / "job" / f"rank{rank}"), ["max", "norm"], [AlertRule("AnomalyNan", 1e10, 0)],
                          rank)
        keys = [f"{m}/output" for m in MODULES] + ["head.weight/grad"]
        for step in range(STEPS):
            vals = np.array([[rank + i + step / 100.0] * 2 for i in range(len(keys))])
            if step == 20:
                vals[2, 1] = np.nan  # an anomaly series per rank
            w.submit(step, keys, vals)
        w.close()
    mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    return tb_data_provider.MultiplexerDataProvider(mux, str(logdir))


class Counting:
    """The real provider, recording every read_scalars call: (thread name, run, tags); ``gate`` blocks the
    warm-up thread's calls after the first ``free`` of them until set."""

    def __init__(self, real, free=None):
        self.real = real
        self.calls = []
        self.free = free
        self.gate = threading.Event()
        self.blocked = threading.Event()
        self._lock = threading.Lock()

    def list_scalars(self, ctx=None, **kw):
        return self.real.list_scalars(ctx, **kw)

    def read_scalars(self, ctx=None, **kw):
        name = threading.current_thread().name
        flt = kw["run_tag_filter"]
        with self._lock:
            self.calls.append((name, tuple(flt.runs), tuple(sorted(flt.tags))))
            n_warm = sum(c[0] == WARM for c in self.calls)
        if self.free is not None and name == WARM and n_warm > self.free:
            self.blocked.set()
            assert self.gate.wait(30), "the test never released the warm-up"
        return self.real.read_scalars(ctx, **kw)

    def reads(self, warm=None):
        """[(run, tag)] read, by the warm-up (True), by requests (False) or by anyone (None)."""
        return [(run, t) for name, (run,), tags in self.calls if warm is None or (name == WARM) == warm
                for t in tags]


@pytest.fixture
def fresh(monkeypatch):
    """A cache and a warm-up of the test's own, so nothing leaks from other tests."""
    cache = SeriesCache()
    warmer = warmup.Warmer(cache)
    monkeypatch.setattr(dashboard, "SERIES_CACHE", cache)
    monkeypatch.setattr(dashboard, "WARMER", warmer)
    monkeypatch.setattr(dashboard, "_listings", {})
    yield cache, warmer
    warmer.join(30)


def client_for(prov):
    routes = get_routes(base_plugin.TBContext(logdir="unused", data_provider=prov))
    return wtest.Client(lambda env, sr: routes[env["PATH_INFO"]](env, sr))


def get(client, path, **params):
    r = client.get(path, query_string=params)
    assert r.status_code == 200, r.get_data(as_text=True)
    return json.loads(r.get_data(as_text=True))


VIEWS = [
    dict(mode="step_module", limit=5, max_cols=7),
    dict(mode="step_module", limit=5, max_cols=7, offset=5, rank=1),
    dict(mode="module_rank", limit=13),
    dict(mode="step_rank", module="layers.3"),
]


def answers(client):
    out = [get(client, "/api/monitor/heatmap", job="job", metric="output", op="norm", **v) for v in VIEWS]
    return out + [get(client, "/api/monitor/anomalies", job="job")]


@pytest.fixture(scope="module")
def expected(provider):
    """The answers without any warm-up, from a cache of their own."""
    mp = pytest.MonkeyPatch()
    mp.setattr(dashboard, "WARM_UP", False)
    mp.setattr(dashboard, "SERIES_CACHE", SeriesCache())
    mp.setattr(dashboard, "_listings", {})
    try:
        return answers(client_for(provider))
    finally:
        mp.undo()


def test_plan_reads_the_first_view_first(provider, fresh, monkeypatch):
    monkeypatch.setattr(warmup, "PAGE", 5)
    monkeypatch.setattr(dashboard, "WARM_UP", False)
    jobs = dashboard.list_jobs(provider, CTX, "")
    order = [(run, tag) for run, tag, _ in warmup.plan(list(jobs.values()))]
    first_page = [("job/rank0", f"{n}/output_norm") for n in ROWS[:5]]
    assert order[:5] == first_page  # the view the dashboard opens on: metric output, norm, lowest rank
    anomalies = [rt for rt in order if rt[1].startswith("anomaly/")]
    assert len(anomalies) == 2 and order[5:7] == anomalies  # then the anomaly list beside it
    assert order[7:12] == [("job/rank1", t) for _, t in first_page]  # then the same rows on the other rank
    assert order[12:22] == [(f"job/rank{r}", f"{n}/output_norm") for r in (0, 1) for n in ROWS[5:10]]
    assert len(order) == len(set(order))
    # every series of the default view is planned, other statistics and metrics get their first page after it
    assert {t for _, t in order if t.endswith("/output_norm") and not t.startswith("anomaly/")} == {f"{n}/output_norm" for n in MODULES}
    assert order.index(("job/rank0", "head/output_max")) > order.index(("job/rank1", "head/output_norm"))
    assert ("job/rank0", "head.weight/grad_norm") in order


def test_warm_cache_answers_the_same_without_reading_again(provider, fresh, expected):
    prov = Counting(provider)
    client = client_for(prov)
    get(client, "/api/monitor/runs")  # lists the jobs: the warm-up starts
    fresh[1].join(30)
    warmed = prov.reads(warm=True)
    assert warmed and len(warmed) == len(set(warmed))  # each series converted once
    assert {("job/rank1", f"{n}/output_norm") for n in MODULES} <= set(warmed)
    assert answers(client) == expected
    assert prov.reads(warm=False) == []  # every view above found its series warm


def test_a_request_never_waits_for_the_whole_warm_up(provider, fresh, expected, monkeypatch):
    monkeypatch.setattr(warmup, "PAGE", 4)
    monkeypatch.setattr(warmup, "CHUNK", 4)
    prov = Counting(provider, free=1)  # the warm-up reads one chunk, then hangs inside its second call
    client = client_for(prov)
    try:
        get(client, "/api/monitor/runs")
        assert prov.blocked.wait(30)
        # its first chunk is done; its second call (the anomaly series, claimed) is stuck
        assert prov.reads(warm=True)[:4] == [("job/rank0", f"{n}/output_norm") for n in ROWS[:4]]
        # the first page is warm: no provider call at all
        page0 = get(client, "/api/monitor/heatmap", job="job", metric="output", op="norm", limit=4, max_cols=7)
        assert page0["rows"] == ROWS[:4] and prov.reads(warm=False) == []
        # a page the warm-up has not reached: the request reads exactly its rows, in one call, while the warm-up
        # is still stuck (were it waiting for the warm-up, this would never return)
        page = get(client, "/api/monitor/heatmap", job="job", metric="output", op="norm", limit=5, max_cols=7,
                   offset=5, rank=1)
        assert not prov.gate.is_set()
        request_calls = [c for c in prov.calls if c[0] != WARM]
        assert request_calls == [(request_calls[0][0], ("job/rank1",),
                                  tuple(sorted(f"{n}/output_norm" for n in ROWS[5:10])))]
        assert page == expected[1]
        prov.gate.set()
        fresh[1].join(30)
        reads = prov.reads()
        assert len(reads) == len(set(reads))  # the warm-up skipped what the request had read: nothing twice
        assert answers(client) == expected
        assert len(prov.reads(warm=False)) == 5


    finally:
        prov.gate.set()


def test_concurrent_requests_read_a_series_once(provider, fresh, monkeypatch):
    monkeypatch.setattr(dashboard, "WARM_UP", False)
    release = threading.Event()
    entered = threading.Event()
    prov = Counting(provider)
    real_read = prov.read_scalars

    def slow_read(ctx=None, **kw):
        entered.set()
        assert release.wait(30)
        return real_read(ctx, **kw)

    prov.read_scalars = slow_read
    client = client_for(prov)
    results = []
    params = dict(job="job", metric="output", op="norm", limit=6, max_cols=5)
    first = threading.Thread(target=lambda: results.append(get(client, "/api/monitor/heatmap", **params)))
    first.start()
    assert entered.wait(30)  # the first request is inside its read, holding its six series
    second = threading.Thread(target=lambda: results.append(get(client, "/api/monitor/heatmap", **params)))
    second.start()
    while fresh[0]._readers < 2:  # the second request is inside the cache: it finds the six series in flight
        second.join(0.01)
    release.set()
    first.join(30), second.join(30)
    assert len(results) == 2 and results[0] == results[1]
    assert len(prov.calls) == 1 and len(prov.reads()) == 6


def test_the_warm_up_stops_at_half_the_cache(provider, monkeypatch):
    cache = SeriesCache(max_series=10)
    warmer = warmup.Warmer(cache)
    monkeypatch.setattr(warmup, "CHUNK", 2)
    monkeypatch.setattr(dashboard, "WARM_UP", False)
    jobs = list(dashboard.list_jobs(provider, CTX, "").values())
    warmer.schedule(provider, CTX, "", object(), jobs)
    warmer.join(30)
    assert warmer.read == 5 and len(cache) == 5


def test_launch_warm_up_waits_for_the_jobs_then_warms_the_first_view(provider, fresh, expected):
    from tbprobe.monitor import warm_start

    empty = Counting(provider)
    empty.list_scalars = lambda ctx=None, **kw: {}  # TensorBoard has loaded nothing yet
    idle = warm_start.start(empty, poll_s=0.001, max_polls=5)
    idle.join(30)
    assert not fresh[1].busy() and empty.calls == []  # no jobs: nothing scheduled, the poller gave up

    prov = Counting(provider)
    thread = warm_start.start(prov, poll_s=0.001)
    thread.join(30)
    assert not thread.is_alive()  # two equal listings: warm-up scheduled, polling over
    fresh[1].join(30)
    assert prov.reads(warm=True) and prov.reads(warm=False) == []
    assert answers(client_for(prov)) == expected
    assert prov.reads(warm=False) == []  # the user's first views found their series warm
