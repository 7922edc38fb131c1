"""/api/filter's metrics are compare metrics only: never a file reference such as "data_name" ("-1" in the
synthetic rows and in msprobe's), whichever path computes them (a small page, the whole graph, one metric)."""
import os

from tbprobe.tb_plugin.graph_store import METRIC_FIELDS
from tests.tb_plugin.conftest import make_api
from tests.tb_plugin.synth_db import make_compare_db


def test_filter_metrics_leave_out_data_name(tmp_path):
    os.makedirs(tmp_path / "big")
    make_compare_db(str(tmp_path / "big" / "c.vis.db"), n_nodes=1500, big_children=600)
    api = make_api(tmp_path)
    q = dict(run="big", file="c.vis.db", step=0, rank=0)
    seen = set()
    for params in (dict(limit=20), dict(limit=1500), dict(limit=1500, metric="Max diff"),
                   dict(limit=50, sort="Max diff", desc=1)):
        status, body = api.get("/api/filter", **q, **params)
        assert status == 200 and body["items"]
        for item in body["items"]:
            keys = set(item["metrics"])
            assert "data_name" not in keys and keys <= set(METRIC_FIELDS), keys
            assert all(isinstance(v, float) and v >= 0 for v in item["metrics"].values())
            seen |= keys
        if "metric" in params:
            assert all(set(it["metrics"]) <= {"Max diff"} for it in body["items"])
    assert "Max diff" in seen  # the rows do carry metrics: the check above is not vacuous
