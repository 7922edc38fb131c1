"""The Monitor view's routes on a real event-file log directory read through TensorBoard's data provider."""
import json

import numpy as np
import pytest
from tensorboard.backend.event_processing import data_provider as tb_data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug import test as wtest
from werkzeug import wrappers

from tbprobe.monitor import dashboard
from tbprobe.monitor.config import AlertRule
from tbprobe.monitor.writer import MonitorWriter
from tbprobe.tb_plugin.monitor_routes import get_routes

MODULES = [f"layers.{i}" for i in range(12)] + ["head"]
STEPS = 50


def _provider(logdir):
    """TensorBoard's own multiplexer and data provider over `logdir`, loaded once (every scalar kept)."""
    mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    return mux, tb_data_provider.MultiplexerDataProvider(mux, str(logdir))


def _write_rank(run_dir, rank, spike_at=None, nan_at=None):
    """A real writer (TensorBoard's EventFileWriter underneath) fed known values: value = rank + row + step/100."""
    w = MonitorWriter(str(run_dir), ["max", "norm"], [AlertRule("AnomalyTurbulence", 1.0, 5)], rank)
    keys = [f"{m}/output" for m in MODULES] + ["head.weight/grad"]
    for step in range(STEPS):
        vals = np.array([[rank + i + step / 100.0] * 2 for i in range(len(keys))])
        if spike_at is not None and step == spike_at:
            vals[3, :] *= 50  # layers.3/output
        if nan_at is not None and step == nan_at:
            vals[5, 1] = np.nan  # layers.5/output_norm
        w.submit(step, keys, vals)
    w.close()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logdir")
    _write_rank(logdir / "jobA" / "rank0", 0, spike_at=30)
    _write_rank(logdir / "jobA" / "rank1", 1, nan_at=40)
    _write_rank(logdir / "solo", 0)
    (logdir / "other").mkdir()
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    ev = EventFileWriter(str(logdir / "other"))  # a plain TensorBoard run: not a monitor job
    ev.add_event(event_pb2.Event(step=0, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0)])))
    ev.close()
    mux, provider = _provider(logdir)
    ctx = base_plugin.TBContext(logdir=str(logdir), data_provider=provider)
    routes = get_routes(ctx)

    def app(environ, start_response):
        handler = routes.get(environ["PATH_INFO"])
        if handler is None:
            return wrappers.Response("no", status=404)(environ, start_response)
        return handler(environ, start_response)

    return wtest.Client(app)


def get(client, path, status=200, **params):
    r = client.get(path, query_string=params)
    assert r.status_code == status, r.get_data(as_text=True)
    return json.loads(r.get_data(as_text=True))


def test_runs_groups_ranks_into_jobs(client):
    jobs = {j["job"]: j for j in get(client, "/api/monitor/runs")["jobs"]}
    assert set(jobs) == {"jobA", "solo"}  # "other" has no monitor tags
    a = jobs["jobA"]
    assert a["ranks"] == [0, 1] and a["runs"] == {"0": "jobA/rank0", "1": "jobA/rank1"}
    assert a["metrics"] == {"grad": ["max", "norm"], "output": ["max", "norm"]}
    assert a["n_modules"] == 14 and a["max_step"] == STEPS - 1
    assert a["n_anomaly_series"] >= 2


def test_heatmap_step_by_module_is_binned_and_paged(client):
    h = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="norm", mode="step_module", rank=0,
            max_cols=10, limit=5, offset=0)
    assert h["rows"] == ["head", "layers.0", "layers.1", "layers.2", "layers.3"]  # natural order
    assert h["total_rows"] == 13
    assert len(h["cols"]) == 10 and h["cols"][0] == [0, 4] and h["cols"][-1] == [45, 49]
    assert len(h["values"]) == 5 and all(len(r) == 10 for r in h["values"])
    # each cell keeps the largest value of its bin: layers.0 (row 1) in bin 0 holds steps 0..4 -> 0 + 4/100
    assert h["values"][1][0] == pytest.approx(0.04)
    # the spike at step 30 on layers.3 survives the binning
    assert h["values"][4][6] == pytest.approx((3 + 0.30) * 50)
    page2 = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="norm", rank=0, limit=5, offset=10)
    assert page2["rows"] == ["layers.9", "layers.10", "layers.11"]
    jump = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="norm", limit=5, focus="layers.10")
    assert jump["offset"] == 10 and "layers.10" in jump["rows"]


def test_heatmap_filter_by_layer(client):
    h = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="max", filter="layers.1,head")
    assert h["rows"] == ["head", "layers.1", "layers.10", "layers.11"]


def test_heatmap_filter_matching_nothing_is_an_empty_page_not_an_error(client):
    h = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="norm", filter="no.such.layer")
    assert h["rows"] == [] and h["total_rows"] == 0


def test_heatmap_step_by_rank_and_module_by_rank(client):
    h = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="norm", mode="step_rank",
            module="layers.5", max_cols=50)
    assert h["rows"] == ["rank0", "rank1"] and len(h["cols"]) == 50
    assert h["values"][1][40] == "nan" and h["values"][0][40] == pytest.approx(5.4)
    m = get(client, "/api/monitor/heatmap", job="jobA", metric="output", op="norm", mode="module_rank", step=20)
    assert m["cols"] == ["rank0", "rank1"] and m["step"] == 20
    row = m["rows"].index("layers.2")
    assert m["values"][row] == [pytest.approx(2.2), pytest.approx(3.2)]


def test_series_several_side_by_side(client):
    s = get(client, "/api/monitor/series", job="jobA", s=["0|layers.3|output|norm", "1|layers.3|output|norm"],
            points=1000)
    assert [x["rank"] for x in s["series"]] == [0, 1]
    pts0 = dict((p[0], p[1]) for p in s["series"][0]["points"])
    assert len(pts0) == STEPS and pts0[30] == pytest.approx(3.3 * 50) and pts0[29] == pytest.approx(3.29)
    small = get(client, "/api/monitor/series", job="jobA", s="0|layers.3|output|norm", points=10)
    assert len(small["series"][0]["points"]) <= 10  # downsampled by the data provider


def test_anomaly_list_points_at_cells(client):
    a = get(client, "/api/monitor/anomalies", job="jobA")
    found = {(x["rank"], x["step"], x["module"], x["op"], x["rule"]) for x in a["items"]}
    assert (0, 30, "layers.3", "norm", "AnomalyTurbulence") in found
    assert (1, 40, "layers.5", "norm", "AnomalyNan") in found
    steps = [x["step"] for x in a["items"]]
    assert steps == sorted(steps)
    only1 = get(client, "/api/monitor/anomalies", job="jobA", rank=1)
    assert {x["rank"] for x in only1["items"]} == {1}


@pytest.mark.parametrize(
    "path, params, status, text",
    [
        ("/api/monitor/heatmap", {"metric": "output", "op": "norm"}, 400, "missing parameter 'job'"),
        ("/api/monitor/heatmap", {"job": "nope", "metric": "output", "op": "norm"}, 404, "no monitor job"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "op": "median"}, 400, "'op' must be"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "mode": "x"}, 400, "'mode' must be"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "limit": "abc"}, 400, "must be an integer"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "limit": "99999"}, 400, "limit"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "rank": "7"}, 404, "no rank 7"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "mode": "step_rank"}, 400, "needs parameter"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "zzz"}, 404, "its metrics: grad (max, norm); output"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "zzz", "mode": "module_rank"}, 404, "no 'zzz' series"),
        ("/api/monitor/heatmap", {"job": "jobA", "metric": "output", "op": "min"}, 404, "with op 'min'"),
        ("/api/monitor/series", {"job": "jobA"}, 400, "at least one series"),
        ("/api/monitor/series", {"job": "jobA", "s": "0|layers.3"}, 400, "must be <rank>|<module>"),
        ("/api/monitor/series", {"job": "jobA", "s": "0|nope|output|norm"}, 404, "no series"),
    ],
)
def test_errors_are_json_4xx(client, path, params, status, text):
    body = get(client, path, status=status, **params)
    assert set(body) == {"error"} and text in body["error"]


def test_reads_are_sized_by_the_page_not_by_the_run(tmp_path, monkeypatch):
    """The heatmap asks the data provider for the visible rows only, each downsampled to a bound that does not
    grow with the number of steps: what keeps 100k steps x 1k tags responsive."""
    monkeypatch.setattr(dashboard, "WARM_UP", False)  # only the requests' own reads are counted here
    _write_rank(tmp_path / "big" / "rank0", 0)
    mux, real = _provider(tmp_path)
    calls = []

    class Recording:
        def list_scalars(self, ctx=None, **kw):
            return real.list_scalars(ctx, **kw)

        def read_scalars(self, ctx=None, **kw):
            calls.append((kw["downsample"], sorted(kw["run_tag_filter"].tags)))
            return real.read_scalars(ctx, **kw)

    routes = get_routes(base_plugin.TBContext(logdir=str(tmp_path), data_provider=Recording()))
    client = wtest.Client(lambda env, sr: routes[env["PATH_INFO"]](env, sr))
    body = get(client, "/api/monitor/heatmap", job="big", metric="output", op="norm", limit=3, max_cols=7)
    assert len(body["rows"]) == 3 and all(len(r) == 7 for r in body["values"])
    assert calls == [(10000, sorted(f"{n}/output_norm" for n in body["rows"]))]
    # the same page again: served from the series cache, the data provider is not asked twice
    again = get(client, "/api/monitor/heatmap", job="big", metric="output", op="norm", limit=3, max_cols=7)
    assert again == body and len(calls) == 1
    # the run grows: the listing's max_step changes, the series are read afresh
    w = MonitorWriter(str(tmp_path / "big" / "rank0"), ["max", "norm"], [], 0)
    w.submit(STEPS + 10, [f"{m}/output" for m in MODULES], np.full((len(MODULES), 2), 7.0))
    w.close()
    mux.Reload()
    monkeypatch.setattr(dashboard, "LISTING_TTL_S", 0.0)  # as after TensorBoard's next reload
    monkeypatch.setattr(dashboard, "LISTING_STALE_S", 0.0)
    grown = get(client, "/api/monitor/heatmap", job="big", metric="output", op="norm", limit=3, max_cols=7)
    assert len(calls) == 2 and grown["cols"][-1][1] == STEPS + 10


def test_a_stale_listing_is_answered_at_once_and_refreshed_behind(tmp_path, monkeypatch):
    import threading
    import time

    _write_rank(tmp_path / "j" / "rank0", 0)
    mux, real = _provider(tmp_path)
    listed = []
    gate = threading.Event()

    class Slow:
        def list_scalars(self, ctx=None, **kw):
            listed.append(1)
            if len(listed) > 1:
                gate.wait(10)  # the refresh blocks until the test lets it go
            return real.list_scalars(ctx, **kw)

        def read_scalars(self, ctx=None, **kw):
            return real.read_scalars(ctx, **kw)

    monkeypatch.setattr(dashboard, "LISTING_TTL_S", 0.0)
    monkeypatch.setattr(dashboard, "LISTING_STALE_S", 60.0)
    routes = get_routes(base_plugin.TBContext(logdir=str(tmp_path), data_provider=Slow()))
    client = wtest.Client(lambda env, sr: routes[env["PATH_INFO"]](env, sr))
    assert [j["job"] for j in get(client, "/api/monitor/runs")["jobs"]] == ["j"]
    t0 = time.monotonic()
    assert [j["job"] for j in get(client, "/api/monitor/runs")["jobs"]] == ["j"]  # stale, not blocked
    assert time.monotonic() - t0 < 5  # the request did not wait for the walk ...
    deadline = time.monotonic() + 10
    while len(listed) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(listed) == 2  # ... which runs behind it
    gate.set()


def test_the_plugin_warms_the_first_view_before_anyone_asks(tmp_path, monkeypatch):
    """get_routes (TensorBoard's start-up) starts the launch warm-up: the view's first heatmap finds its series
    read already (counted provider calls, no timing)."""
    import threading

    from tbprobe.monitor import warm_start, warmup
    from tbprobe.monitor.series_cache import SeriesCache

    _write_rank(tmp_path / "w" / "rank0", 0)
    mux, real = _provider(tmp_path)
    reads = []
    cache = SeriesCache()
    warmer = warmup.Warmer(cache)
    monkeypatch.setattr(dashboard, "SERIES_CACHE", cache)
    monkeypatch.setattr(dashboard, "WARMER", warmer)
    monkeypatch.setattr(warm_start, "POLL_S", 0.001)

    class Recording:
        def list_scalars(self, ctx=None, **kw):
            return real.list_scalars(ctx, **kw)

        def read_scalars(self, ctx=None, **kw):
            reads.append((threading.current_thread().name, sorted(kw["run_tag_filter"].tags)))
            return real.read_scalars(ctx, **kw)

    before = set(threading.enumerate())
    routes = get_routes(base_plugin.TBContext(logdir=str(tmp_path), data_provider=Recording()))
    launch = [t for t in set(threading.enumerate()) - before if t.name == "tbprobe-monitor-launch"]
    assert len(launch) == 1
    for t in launch:
        t.join(30)
    warmer.join(30)
    assert reads and {name for name, _ in reads} == {"tbprobe-monitor-warmup"}
    client = wtest.Client(lambda env, sr: routes[env["PATH_INFO"]](env, sr))
    body = get(client, "/api/monitor/heatmap", job="w", metric="output", op="norm", limit=5, max_cols=7)
    assert len(body["rows"]) == 5 and all(v is not None for row in body["values"] for v in row)
    assert {name for name, _ in reads} == {"tbprobe-monitor-warmup"}  # the request read nothing itself


def test_monitor_answers_through_the_plugin_carry_server_timing_and_gzip(tmp_path):
    """Every API answer says its server time and a JSON answer over 32 KiB is gzipped for a browser that accepts
    it (docs/http_api.md): the monitor's routes, merged into the plugin's, had neither (a 33 kB anomaly list went
    out plain, /api/monitor/runs without Server-Timing)."""
    import gzip

    from tensorboard.backend import application

    from tbprobe.tb_plugin.graph_ascend_plugin import GraphAscendPlugin

    w = MonitorWriter(str(tmp_path / "nan" / "rank0"), ["max", "norm"], [AlertRule("AnomalyTurbulence", 1.0, 5)], 0,
                      non_finite="every_step")
    keys = [f"{m}/output" for m in MODULES]
    for step in range(STEPS):
        w.submit(step, keys, np.full((len(keys), 2), np.nan))   # an AnomalyNan per module, op and step
    w.close()
    _, provider = _provider(tmp_path)
    plugin = GraphAscendPlugin(base_plugin.TBContext(logdir=str(tmp_path), data_provider=provider))
    tb = wtest.Client(application.TensorBoardWSGI([plugin]))
    prefix = "/data/plugin/graph_ascend/api/monitor"
    runs = tb.get(prefix + "/runs")
    assert runs.status_code == 200 and float(runs.headers["Server-Timing"].split("dur=")[1]) >= 0
    q = dict(job="nan", limit=10000)
    plain = tb.get(prefix + "/anomalies", query_string=q)
    zipped = tb.get(prefix + "/anomalies", query_string=q, headers={"Accept-Encoding": "gzip, deflate"})
    assert plain.status_code == 200 and len(plain.data) > 32 * 1024
    assert "Content-Encoding" not in plain.headers and zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.data) == plain.data and "Server-Timing" in zipped.headers
    assert json.loads(plain.data)["total"] >= len(MODULES) * STEPS
    err = tb.get(prefix + "/heatmap", query_string=dict(job="nope", metric="output"))
    assert err.status_code == 404 and "error" in err.get_json() and "Server-Timing" in err.headers
