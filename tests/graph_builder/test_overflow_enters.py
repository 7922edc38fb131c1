"""Where Inf/NaN first comes in when no node is where an overflow starts (-oc). A GradScaler's overflow: the
scaled loss gradient is finite in float32 (cross_entropy's backward output 1.8e16) and becomes inf when autocast's
backward casts it to float16, a call no dump records; the first recorded node holding an inf (linear's backward)
has it in its input, so it is "high" and no node is critical. The summary said "first overflow: none" and the
Overflow page "each had Inf/NaN coming in", naming no node; now both name the node where it comes in."""
import math

from tbprobe.graph_builder import run_graph
from tbprobe.graph_builder.run import format_summary
from tests.graph_builder import synth

T = synth.tensor
INF16 = T((4, 8), mx=math.inf, mn=-math.inf, mean=math.nan, norm=math.inf, dtype="torch.float16")
ONE = T((), mx=1.0, mn=1.0, mean=1.0, norm=1.0)
SCALE = T((), mx=1.15e18, mn=1.15e18, mean=1.15e18, norm=1.15e18)
HUGE = T((4, 8), mx=0.0, mn=-1.8e16, mean=-2.8e14, norm=1.4e17)
SMALL = T((4, 8), mx=1e-3, mn=-1e-3, mean=0.0, norm=1e-2)


def _fwd(inp, out):
    return {"input_args": inp, "input_kwargs": {}, "output": out}


def _bwd(inp, out):
    return {"input": inp, "output": out}


def _scaler_rank(root, grad_in=INF16, mask_fill=False):
    data = {"Functional.cross_entropy.0.forward": _fwd([SMALL], [ONE]),
            "Tensor.__mul__.0.forward": _fwd([ONE, SCALE], [SCALE]),
            "Tensor.__mul__.0.backward": _bwd([ONE], [SCALE]),      # x1e18: a norm jump, "high", finite
            "Functional.cross_entropy.0.backward": _bwd([SCALE], [HUGE]),
            "Functional.linear.8.backward": _bwd([grad_in], [grad_in]),
            "Functional.gelu.1.backward": _bwd([grad_in], [grad_in])}
    if mask_fill:   # an inf made by a recorded call before it (first_overflow skips it: its argument is -inf)
        data = {"Tensor.masked_fill.0.forward": _fwd([SMALL, SMALL, {"type": "float", "value": -math.inf}],
                                                     [T((4, 8), mx=1.0, mn=-math.inf, mean=-math.inf,
                                                        norm=math.inf)]), **data}
    return synth.simple_rank(root, data, {k: None for k in data})


def _build(tmp_path, debug, bench=None):
    return run_graph(str(debug), str(bench) if bench else None, str(tmp_path / "o"), parallel=False,
                     progress=False, overflow_check=True)


def test_a_scalers_overflow_names_where_the_inf_comes_in(tmp_path):
    result = _build(tmp_path, _scaler_rank(tmp_path / "d"))
    assert result.summary["first_overflow"] is None
    assert result.summary["nonfinite_enters"] == "step 0 rank 0: Functional.linear.8.backward"
    line = [x for x in format_summary(result).splitlines() if "first overflow" in x][0]
    assert "first overflow: none" in line
    assert "inf/nan first comes in at step 0 rank 0: Functional.linear.8.backward" in line


def test_no_entering_node_where_the_inf_is_made_by_a_recorded_call_or_the_bench_has_it(tmp_path):
    # the earliest inf is a skipped critical node's output (a mask's -inf fill): it came from there
    result = _build(tmp_path, _scaler_rank(tmp_path / "m", mask_fill=True))
    assert result.summary["first_overflow"] is None and result.summary["nonfinite_enters"] is None
    assert "comes in" not in format_summary(result)
    # the bench's linear backward has the same inf input: no overflow of the debug run's
    result = run_graph(str(_scaler_rank(tmp_path / "d")), str(_scaler_rank(tmp_path / "b")), str(tmp_path / "c"),
                       parallel=False, progress=False, overflow_check=True)
    assert result.summary["nonfinite_enters"] is None
    # finite everywhere (a norm jump alone): nothing comes in
    result = _build(tmp_path / "f", _scaler_rank(tmp_path / "f" / "d", grad_in=SMALL))
    assert result.summary["nonfinite_enters"] is None


def test_compare_against_a_finite_bench_names_it_and_a_real_start_wins(tmp_path):
    result = run_graph(str(_scaler_rank(tmp_path / "d")), str(_scaler_rank(tmp_path / "b", grad_in=SMALL)),
                       str(tmp_path / "c"), parallel=False, progress=False, overflow_check=True)
    assert result.summary["nonfinite_enters"] == "step 0 rank 0: Functional.linear.8.backward"
    # a critical node: the first overflow, and no "comes in" besides it
    data = {"Functional.linear.0.forward": _fwd([SMALL], [INF16]), "Functional.gelu.0.forward": _fwd([INF16], [INF16])}
    root = synth.simple_rank(tmp_path / "k", data, {k: None for k in data})
    result = _build(tmp_path / "k2", root)
    assert result.summary["first_overflow"] == "step 0 rank 0: Functional.linear.0.forward"
    assert result.summary["nonfinite_enters"] is None
