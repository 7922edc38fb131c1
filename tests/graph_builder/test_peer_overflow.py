"""Overflow levels of collectives whose output is a peer's data (-oc): a recv's "input" is this rank's receive
buffer, so "finite inputs, an inf output" graded it critical, the node that made the inf, and the Overflow page
and the first-overflow rule blamed the rank that only received it. Data-moving collectives grade what comes in
as medium; reducing ones keep the general rule (a sum of finite values can overflow there)."""
import math

from tbprobe.graph_builder import run_graph
from tbprobe.graph_builder.overflow import overflow_level
from tests.graph_builder import golden, synth

T = synth.tensor
NAN = T((4,), mx=math.nan, mn=math.nan, mean=math.nan, norm=math.nan)
BIG = T((4,), mx=3e38, mn=-3e38, mean=0.0, norm=5e38)
SMALL = T((4,), mx=1e-3, mn=-1e-3, mean=0.0, norm=1e-3)


def _entry(inp, out):
    return {"input_args": inp, "input_kwargs": {}, "output": out}


def test_received_inf_is_medium_not_critical():
    # tbprobe's recv: the buffer not recorded (null), the received tensor the output
    assert overflow_level("Distributed.recv.0.forward", _entry([None, {"type": "int", "value": 3}],
                                                               [NAN, {"type": "int", "value": 3}])) == "medium"
    for op in ("irecv", "broadcast", "all_gather", "all_gather_into_tensor", "all_to_all_single", "scatter"):
        assert overflow_level(f"Distributed.{op}.0.forward", _entry([SMALL], [NAN])) == "medium", op
    assert overflow_level("Distributed.all_gather.1.forward", _entry([NAN], [NAN])) == "high"
    # a peer's larger numbers are not a norm jump of this call's
    assert overflow_level("Distributed.recv.1.forward", _entry([SMALL], [BIG])) is None
    assert overflow_level("Distributed.broadcast.1.forward", _entry([SMALL], [SMALL])) is None


def test_reducing_collectives_and_other_calls_keep_the_rule():
    # (3e38 + 3e38 over two ranks is inf: the all_reduce itself can make it)
    assert overflow_level("Distributed.all_reduce.0.forward", _entry([BIG], [NAN])) == "critical"
    assert overflow_level("Distributed.reduce_scatter.0.forward", _entry([BIG], [NAN])) == "critical"
    assert overflow_level("Torch.recv_like.0.forward", _entry([SMALL], [NAN])) == "critical"
    assert overflow_level("Functional.linear.0.forward", _entry([SMALL], [BIG])) == "high"


def test_the_rank_that_received_the_inf_has_no_first_overflow(tmp_path):
    """Rank 0 makes the NaN (its linear), sends it; rank 1 receives it and carries it on. Rank 1's recv was
    critical and rank 1's own first overflow; its row on the Overflow page said it made the NaN."""
    def ranks(root, bad):
        out0 = NAN if bad else SMALL
        r0 = {"Functional.linear.0.forward": _entry([SMALL], [out0]),
              "Distributed.send.0.forward": _entry([out0, {"type": "int", "value": 1}], [None])}
        r1 = {"Distributed.recv.0.forward": _entry([None, {"type": "int", "value": 0}],
                                                   [out0, {"type": "int", "value": 0}]),
              "Torch.tanh.0.forward": _entry([out0], [out0])}
        synth.simple_rank(root / "step0" / "rank0", r0, {k: None for k in r0})
        synth.simple_rank(root / "step0" / "rank1", r1, {k: None for k in r1})

    ranks(tmp_path / "d", True)
    ranks(tmp_path / "b", False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False, overflow_check=True)
    assert result.summary["first_overflow"] == "step 0 rank 0: Functional.linear.0.forward"
    conn = golden.open_ro(result.path)
    levels = dict(conn.execute("SELECT rank || ' ' || node_name, overflow_level FROM tb_nodes "
                               "WHERE data_source = 'NPU' AND node_name LIKE '%.forward'"))
    firsts = [row[0] for row in conn.execute("SELECT node_name FROM tbprobe_findings WHERE kind = 'first_overflow' "
                                             "ORDER BY node_name")]
    conn.close()
    assert levels == {"0 Functional.linear.0.forward": "critical", "0 Distributed.send.0.forward": "medium",
                      "1 Distributed.recv.0.forward": "medium", "1 Torch.tanh.0.forward": "high"}
    # rank 1 has no first overflow of its own: the NaN came in
    assert firsts == ["Functional.linear.0.forward"]
