"""tbprobe's .vis.db against the reference's fixture databases, field by field, for every fixture case.

Documented differences (docs/compatibility.md, ## Graph builder) are the only ones allowed:
- tensor mode: the reference computes MaxRelativeErr (and sometimes Cosine) in float32; tbprobe in float64, so
  the strings agree to about 6 significant digits, not to the last digit;
- tensor mode: the One Thousandth rule uses 0.6 as documented (the reference's code uses 0.1), which turns
  Module.layers.1.Block.forward.0 (output ratio 0.5) into an error;
- tensor mode: an Apis_Between_Modules collection takes the worst of its calls' indexes; the reference sets it
  before its real-data compare has given any call one, so its collections are always 0 (here 0 over a
  Tensor.__pow__.0.backward of index 1);
- the `dst` / `src` arguments of Distributed.send/recv are compared like any other int argument;
- dump_data_dir holds this machine's folder of the tensors, not the path recorded on the dumping machine."""
import math
import shutil

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden

CASES = {
    "build": ("npu_stat", None, {"overflow_check": True}),
    "cmp_stat": ("npu_stat", "bench_stat", {"overflow_check": True}),
    "cmp_md5": ("npu_md5", "bench_md5", {"overflow_check": True}),
    "cmp_tensor": ("npu_tensor", "bench_tensor", {"overflow_check": True}),
    "cmp_stat_fuzzy": ("npu_stat", "bench_stat", {"fuzzy": True}),
    "cmp_struct": ("npu_struct", "bench_struct", {}),
    "cmp_dist": ("npu_dist/step0", "bench_dist/step0", {}),
}


def _close(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return x == y or (math.isfinite(x) and math.isfinite(y) and abs(x - y) <= 1e-5 * max(abs(x), abs(y)))


def _allowed(case, nid, what, ours, ref) -> bool:
    if case == "cmp_tensor":
        if what == "dump_data_dir":
            return True
        if nid.endswith("Module.layers.1.Block.forward.0"):
            return True  # the 0.6 threshold fix
        if nid.endswith("Apis_Between_Modules.0") and what == "precision_index":
            return (ours, ref) == (1, 0)  # the reference's collections, set before its compare: always 0
        if isinstance(ours, dict):
            diff = {k for k in set(ours) | set(ref) if ours.get(k) != ref.get(k)}
            return diff <= {"MaxRelativeErr", "Cosine"} and all(_close(ours[k], ref[k]) for k in diff)
    if case == "cmp_dist" and isinstance(ours, dict) and ("input.dst" in what or "input.src" in what):
        return True
    return False


def _run(case, tmp_path):
    debug, bench, kwargs = CASES[case]
    return run_graph(str(golden.INPUTS / debug), str(golden.INPUTS / bench) if bench else None,
                     str(tmp_path / case), parallel=False, progress=False, **kwargs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference(case, tmp_path):
    result = _run(case, tmp_path)
    diffs = golden.differences(result.path, golden.reference_db(case))
    unexplained = [d for d in diffs if not _allowed(case, *d)]
    assert unexplained == [], unexplained[:5]
    ref_cfg, our_cfg = golden.config(golden.reference_db(case)), golden.config(result.path)
    for key in ("graph_type", "task", "micro_steps", "overflow_check", "rank_list", "step_list"):
        assert our_cfg[key] == ref_cfg[key], key


def test_precision_index_equal_everywhere_but_documented(tmp_path):
    """The headline promise: precision_index equals msprobe's on every node of every compare fixture."""
    for case in ("cmp_stat", "cmp_md5", "cmp_stat_fuzzy", "cmp_struct", "cmp_dist", "cmp_tensor"):
        result = _run(case, tmp_path)
        ours, ref = golden.nodes(result.path), golden.nodes(golden.reference_db(case))
        assert set(ours) == set(ref)
        changed = {nid for nid in ours if ours[nid]["precision_index"] != ref[nid]["precision_index"]}
        expected = {"NPU_0_0_Module.layers.1.Block.forward.0",
                    "NPU_0_0_Apis_Between_Modules.0"} if case == "cmp_tensor" else set()
        assert changed == expected, case


def test_multi_steps_and_ranks(tmp_path):
    """2 steps x 2 ranks per side (the fixture 'multi' was made from copies of the statistics dumps)."""
    for side, src in (("npu", "npu_stat"), ("bench", "bench_stat")):
        for step in (0, 1):
            for rank in (0, 1):
                shutil.copytree(golden.INPUTS / src / "step0" / "rank0", tmp_path / side / f"step{step}" / f"rank{rank}")
    result = run_graph(str(tmp_path / "npu"), str(tmp_path / "bench"), str(tmp_path / "out"), overflow_check=True,
                       parallel=True, progress=False)
    diffs = golden.differences(result.path, golden.reference_db("multi"))
    assert diffs == []
    assert golden.config(result.path)["rank_list"] == "[0, 1]"
    assert golden.config(result.path)["step_list"] == "[0, 1]"
    assert result.summary["graphs"] == 4


@pytest.mark.parametrize("overflow_check", [True, False])
def test_split_rank_work_gives_the_same_database(tmp_path, monkeypatch, overflow_check):
    """One rank's rows made by two processes (the speed path for big dumps) equal the serial result, for
    compares and builds, with and without -oc (which decides who writes the tbprobe_node_ext rows)."""
    from tbprobe.graph_builder import engine
    from tbprobe.graph_builder import run as run_mod

    monkeypatch.setattr(engine, "SPLIT_MIN_NODES", 0)
    monkeypatch.setattr(engine, "BUILD_SPLIT_MIN_NODES", 0)
    monkeypatch.setattr(run_mod, "SPLIT_IDLE", 0.0)  # the helper however busy the cores are
    monkeypatch.setattr(engine, "_BLOCK", 3)  # small blocks: both processes get a share of these small graphs
    helper_shares = []
    real_deal = engine._deal

    def deal(nodes, share):
        mine, theirs = real_deal(nodes, share)
        helper_shares.append(len(theirs))
        return mine, theirs

    monkeypatch.setattr(engine, "_deal", deal)
    kwargs = dict(overflow_check=overflow_check, progress=False)
    for case, bench in (("npu_stat", "bench_stat"), ("npu_md5", "bench_md5"), ("npu_stat", None)):
        b = str(golden.INPUTS / bench) if bench else None
        serial = run_graph(str(golden.INPUTS / case), b, str(tmp_path / f"a{case}{bench}"), parallel=False,
                           **kwargs)
        split = run_graph(str(golden.INPUTS / case), b, str(tmp_path / f"b{case}{bench}"), parallel=True, **kwargs)
        assert helper_shares[-2] > 0  # the helper had debug nodes to do (the last two calls: debug, bench side)
        assert golden.differences(split.path, serial.path) == []
        assert split.summary["first_divergence"] == serial.summary["first_divergence"]
        ext = "SELECT * FROM tbprobe_node_ext ORDER BY id"
        assert [tuple(r) for r in golden.open_ro(split.path).execute(ext)] == \
            [tuple(r) for r in golden.open_ro(serial.path).execute(ext)]
