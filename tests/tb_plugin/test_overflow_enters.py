"""/api/overflow with no start: `enters` flags where Inf/NaN first comes in, made by a call the dump does not
record (a GradScaler's loss gradient cast to float16 in the backward). Before, no item of such a list was flagged
and the page said only that every node had Inf/NaN coming in."""
import os

from tbprobe.graph_builder import run_graph
from tests.graph_builder import synth
from tests.graph_builder.test_overflow_enters import INF16, SMALL, _fwd, _scaler_rank
from tests.tb_plugin.conftest import make_api


def _flags(body):
    return [(i["name"], i["first"], i["enters"]) for i in body["items"] if i["first"] or i["enters"]]


def test_overflow_route_flags_where_the_inf_comes_in(tmp_path):
    logs = tmp_path / "logs"
    run_graph(str(_scaler_rank(tmp_path / "d")), None, str(logs / "build"), parallel=False, progress=False,
              overflow_check=True)
    run_graph(str(_scaler_rank(tmp_path / "d")), str(_scaler_rank(tmp_path / "b", grad_in=SMALL)),
              str(logs / "cmp"), parallel=False, progress=False, overflow_check=True)
    run_graph(str(_scaler_rank(tmp_path / "m", mask_fill=True)), None, str(logs / "mask"), parallel=False,
              progress=False, overflow_check=True)
    api = make_api(logs)
    for run in ("build", "cmp"):
        file = os.listdir(logs / run)[0]
        status, body = api.get("/api/overflow", run=run, file=file, step=0, rank=0)
        assert status == 200
        assert _flags(body) == [("Functional.linear.8.backward", False, True)]
    # the bench side's list: its linear backward is finite, nothing overflows but the norm jump
    status, body = api.get("/api/overflow", run="cmp", file=os.listdir(logs / "cmp")[0], step=0, rank=0,
                           side="Bench")
    assert status == 200 and _flags(body) == []
    # the inf came from a recorded call (the mask's -inf fill): nothing flagged
    status, body = api.get("/api/overflow", run="mask", file=os.listdir(logs / "mask")[0], step=0, rank=0)
    assert status == 200 and body["total"] and _flags(body) == []


def test_the_live_graph_has_its_findings_computed(tmp_path):
    """The collector's live .vis.db stores no findings (its tbprobe_findings table is empty): read as stored, the
    critical linear of an overflowing run was no first overflow on the Overflow page nor in /api/findings."""
    from tbprobe.collector.live_graph import LiveGraph

    data = {"Functional.linear.0.forward": _fwd([SMALL], [INF16]), "Functional.gelu.0.forward": _fwd([INF16], [INF16])}
    rank = synth.simple_rank(tmp_path / "dump" / "step0" / "proc1", data, {k: None for k in data})
    live = LiveGraph(str(tmp_path / "dump"))
    live.update(str(rank), 0)
    live.close()
    api = make_api(tmp_path / "dump_tb")
    status, body = api.get("/api/overflow", run=".", file="build_proc1.vis.db", step=0, rank=0)
    assert status == 200
    assert _flags(body) == [("Functional.linear.0.forward", True, False)]
    status, body = api.get("/api/findings", run=".", file="build_proc1.vis.db", step=0, rank=0)
    assert status == 200 and body["first_overflow"]["name"] == "Functional.linear.0.forward"
