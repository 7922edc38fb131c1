"""/api/filter's metrics are compare metrics only: never a file reference such as "data_name" ("-1" in the
synthetic rows and in msprobe's), whichever path computes them (a small page, the whole graph, one metric)."""
import json
import os

import pytest

from tbprobe.tb_plugin.stored_metrics import METRIC_FIELDS
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
            assert all(isinstance(v, float) or v in ("nan", "inf", "-inf") for v in item["metrics"].values())
            seen |= keys
        if "metric" in params:
            assert all(set(it["metrics"]) <= {"Max diff"} for it in body["items"])
    assert "Max diff" in seen  # the rows do carry metrics: the check above is not vacuous


def _item(**fields) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": "[4]", "Max": "1.0", "Min": "-1.0",
            "Mean": "0.0", "Norm": "2.0", "data_name": "-1", **{k.replace("_", " "): v for k, v in fields.items()}}


def test_filter_metrics_are_the_worst_output_figures_signed_nan_kept(tmp_path):
    """A node whose output is all NaN read "Max diff=0 Min diff=0 Mean diff=0" (NaN was skipped), and one whose
    output is NaN read its input's differences with the sign dropped (the largest absolute value over inputs and
    outputs together). The metrics are now the node's worst output figures: signed as stored, NaN and infinities
    as text, the output farthest from 0 (for Cosine, the lowest), whichever path computes them."""
    import sqlite3

    os.makedirs(tmp_path / "r")
    path = make_compare_db(str(tmp_path / "r" / "c.vis.db"), n_nodes=700, big_children=20, extra_names=())
    nan_out, mixed = "Functional.linear.30.forward", "Functional.linear.31.forward"
    data = {
        nan_out: ({f"{nan_out}.input.0": _item(Max_diff="0.5", Min_diff="-0.2", Mean_diff="0.01")},
                  {f"{nan_out}.output.0": _item(Max="nan", Min="nan", Max_diff="nan", Min_diff="nan",
                                                Mean_diff="nan", NormRelativeErr="nan")}),
        mixed: ({f"{mixed}.input.0": _item(Max_diff="0.9709", Min_diff="-0.968", Mean_diff="-0.0042",
                                           Cosine="0.1"),
                 f"{mixed}.parameters.weight": _item(Max_diff="3.0")},
                {f"{mixed}.output.0": _item(Max_diff="-0.75", Min_diff="-0.968", Mean_diff="-0.0042",
                                            Cosine="0.99", NormRelativeErr="200.0%"),
                 f"{mixed}.output.1": _item(Max_diff="0.5", Min_diff="nan", Mean_diff="0.001", Cosine="0.5",
                                            NormRelativeErr="-inf")}),
    }
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tb_nodes SET precision_index = 0 WHERE data_source = 'NPU'")
        for name, (inp, out) in data.items():
            conn.execute("UPDATE tb_nodes SET precision_index = 1, input_data = ?, output_data = ? "
                         "WHERE node_name = ? AND data_source = 'NPU'", (json.dumps(inp), json.dumps(out), name))
    conn.close()
    want = {nan_out: {"Max diff": "nan", "Min diff": "nan", "Mean diff": "nan", "NormRelativeErr": "nan"},
            mixed: {"Max diff": -0.75, "Min diff": "nan", "Mean diff": -0.0042, "Cosine": 0.5,
                    "NormRelativeErr": "-inf"}}
    api = make_api(tmp_path)
    q = dict(run="r", file="c.vis.db", step=0, rank=0)
    status, body = api.get("/api/filter", **q, precision="error")      # a small page: read row by row
    assert status == 200 and [i["name"] for i in body["items"]] == [nan_out, mixed]
    for item in body["items"]:
        assert item["metrics"] == want[item["name"]], item
    status, body = api.get("/api/filter", **q, limit=700)              # a big page: the whole-graph SQL
    assert status == 200 and len(body["items"]) == 700
    got = {i["name"]: i["metrics"] for i in body["items"] if i["name"] in want}
    assert got == want
    for metric in ("Max diff", "Min diff", "Cosine", "NormRelativeErr"):   # one metric: SQL, cached per metric
        _, body = api.get("/api/filter", **q, precision="error", metric=metric)
        assert {i["name"]: i["metrics"] for i in body["items"]} == {
            n: ({metric: m[metric]} if metric in m else {}) for n, m in want.items()}
    # sorted by magnitude, NaN first when descending
    _, body = api.get("/api/filter", **q, sort="Min diff", desc=1, limit=3)
    assert body["items"][0]["metrics"]["Min diff"] == "nan"


def test_a_parameters_grad_node_is_read_by_its_gradients(api, logdir):
    """A parameters_grad node has no outputs: its gradients (stored with the inputs) are its result."""
    from tests.tb_plugin.conftest import db_file, sql

    run, file = db_file(logdir, "cmp_stat")
    name = "Module.head.Linear.parameters_grad.0"
    grads = json.loads(sql(logdir / run / file, "SELECT input_data FROM tb_nodes WHERE node_name = ? AND "
                                                "data_source = 'NPU'", (name,))[0][0])
    diffs = [float(g["Max diff"]) for g in grads.values() if "Max diff" in g]
    assert diffs
    worst = max(diffs, key=abs)
    for params in (dict(limit=1000), dict(limit=1000, metric="Max diff")):
        _, body = api.get("/api/filter", run=run, file=file, step=0, rank=0, **params)
        metrics = {i["name"]: i["metrics"] for i in body["items"]}
        assert metrics[name]["Max diff"] == pytest.approx(worst)
