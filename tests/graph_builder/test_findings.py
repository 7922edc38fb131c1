"""Roll-up, first divergence, first overflow and data-flow edges (tbprobe's own tables)."""
import json

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden, synth
from tests.graph_builder.finding_cases import scaled_mlp, under

T = synth.tensor


def _chain(folder, scale_mid=1.0, flow=True):
    """x -> Torch.a -> Torch.b -> Torch.c inside Module.blk; the debug side perturbs b's output."""
    blk = "Module.blk.Blk.forward.0"
    data = {
        "Torch.a.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
        "Torch.b.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * scale_mid)]),
        "Torch.c.0.forward": synth.api_entry([T((4,), norm=2.0 * scale_mid)], [T((4,), norm=2.0 * scale_mid)]),
        blk: synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * scale_mid)]),
    }
    return under(folder, data, blk, {"Torch.b.0.forward": {"0": "Torch.a.0.forward"},
                                      "Torch.c.0.forward": {"0": "Torch.b.0.forward"}} if flow else None)


def test_first_divergence_rollup_and_edges(tmp_path):
    _chain(tmp_path / "d", scale_mid=3.0)
    _chain(tmp_path / "b", scale_mid=1.0, flow=False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    conn = golden.open_ro(result.path)
    prec = dict(conn.execute("SELECT node_name, precision_index FROM tb_nodes WHERE data_source='NPU'"))
    assert prec["Torch.a.0.forward"] == 0
    assert prec["Torch.b.0.forward"] == 1      # inputs pass, output Norm off by 200%
    assert prec["Torch.c.0.forward"] == 0      # off by as much as its input: carried, not caused
    assert prec["Module.blk.Blk.forward.0"] == 1  # an error too, but it completes later
    finding = conn.execute("SELECT node_name, detail FROM tbprobe_findings WHERE graph_id='NPU_0_0' "
                           "AND kind='first_divergence'").fetchone()
    assert finding[0] == "Torch.b.0.forward"
    assert json.loads(finding[1])["traced_from"] == ["Torch.a.0.forward"]
    assert result.summary["first_divergence"] == "step 0 rank 0: Torch.b.0.forward"
    # the summary line names the module the operator ran in too (a user looks for the layer first)
    assert "first divergent node: step 0 rank 0: Torch.b.0.forward (in Module.blk.Blk.forward.0)" in \
        result.summary_text()
    sub = dict(conn.execute("SELECT id, subtree_precision FROM tbprobe_node_ext"))
    assert sub["NPU_0_0_Module.blk.Blk.forward.0"] == 1
    assert sub["NPU_0_0_DefaultModel"] == 1
    assert sub["NPU_0_0_Torch.a.0.forward"] == 0
    edges = set(tuple(r) for r in conn.execute("SELECT src, dst, dst_slot FROM tbprobe_edges WHERE graph_id='NPU_0_0'"))
    assert edges == {("Torch.a.0.forward", "Torch.b.0.forward", "0"), ("Torch.b.0.forward", "Torch.c.0.forward", "0")}


def _finding(result, graph_id="NPU_0_0"):
    conn = golden.open_ro(result.path)
    row = conn.execute("SELECT node_name FROM tbprobe_findings WHERE graph_id=? AND kind='first_divergence'",
                       (graph_id,)).fetchone()
    return row[0] if row else None


def test_a_differing_weight_is_where_the_divergence_starts(tmp_path):
    """A module whose weight differs (x3) turns a passing input into an output 200 % off. The reference's rule
    passes it (its parameters differ too: not "inputs pass, output fails"), so only errors counted and the first
    divergence came later, in another step's backward. An output past the rule's 50 % with its inputs passing
    is where a divergence starts."""
    def rank(folder, w):
        fc = "Module.fc.Linear.forward.0"
        data = {
            "Module.inp.Linear.forward.0": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
            fc: dict(synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * w)]),
                     parameters={"weight": T((4, 4), norm=1.0 * w, grad=True)}),
            "Module.out.Linear.forward.0": dict(synth.api_entry([T((4,), norm=2.0 * w)], [T((4,), norm=1.0 * w)])),
            "Module.out.Linear.backward.0": {"input": [T((4,), norm=1.0)], "output": [T((4,), norm=2.0 * w)]},
        }
        return synth.simple_rank(folder, data, {k: None for k in data})

    rank(tmp_path / "d", 3.0)
    rank(tmp_path / "b", 1.0)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result) == "Module.fc.Linear.forward.0"
    conn = golden.open_ro(result.path)
    assert conn.execute("SELECT precision_index FROM tb_nodes WHERE node_name='Module.fc.Linear.forward.0' "
                        "AND data_source='NPU'").fetchone()[0] == 0   # (the reference's rule, kept)


def _l1_rank(folder, bad_weight, flow=True):
    """At L1 a weight is an operator's argument, not a parameter: linear(x, w) with w NaN after a bad step, then
    the optimizer's add_(w, grad) and a later op. With data flow, w is known as a leaf that trains."""
    nan = float("nan")
    w = T((4, 4), mx=nan, mn=nan, mean=nan, norm=nan, grad=True) if bad_weight else T((4, 4), norm=1.0, grad=True)
    y = T((4,), mx=nan, mn=nan, mean=nan, norm=nan, grad=True) if bad_weight else T((4,), norm=2.0, grad=True)
    g = T((4, 4), mx=nan, mn=nan, mean=nan, norm=nan) if bad_weight else T((4, 4), norm=0.5)
    data = {
        "Functional.linear.0.forward": synth.api_entry([T((4,), norm=2.0), w], [y]),
        "Functional.relu.0.forward": synth.api_entry([y], [y]),
        # (an error whose inputs pass, later: where the search stopped when the weight counted as an input)
        "Functional.relu.0.backward": {"input": [T((4,), norm=1.0)],
                                       "output": [T((4,), norm=3.0 if bad_weight else 1.0)]},
        "Tensor.add_.0.forward": synth.api_entry([w, g], [w]),
    }
    extra = {"dataflow.json": {"Functional.relu.0.forward": {"0": "Functional.linear.0.forward"}}} if flow else None
    return synth.simple_rank(folder, data, {k: None for k in data}, extra=extra)


def test_at_l1_a_bad_weight_argument_is_where_the_divergence_starts(tmp_path):
    """The weight, an argument, failed the "inputs pass" test of every forward call: the first divergence was the
    first backward call. With the data flow, a failing input no recorded call made and that requires grad is a
    leaf where the difference enters; a failing one that needs no gradient (the optimizer's gradient) is not."""
    _l1_rank(tmp_path / "d", True)
    _l1_rank(tmp_path / "b", False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o1"), parallel=False,
                       progress=False)
    assert _finding(result) == "Functional.linear.0.forward"
    # without the data flow (msprobe's dumps) the inputs decide alone: the earliest error, as before
    _l1_rank(tmp_path / "d2", True, flow=False)
    result = run_graph(str(tmp_path / "d2"), str(tmp_path / "b"), str(tmp_path / "o2"), parallel=False,
                       progress=False)
    assert _finding(result) == "Functional.relu.0.backward"


def test_an_optimizers_bad_gradient_argument_is_not_where_a_divergence_starts(tmp_path):
    """A NaN gradient from the backward pass (a hook's unmatched multiplication made it, so every backward record
    has a failing input), read by the optimizer's add_: it needs no gradient and no recorded call made it, so it
    is carried in, not where the difference enters; the earliest error stays the first divergence."""
    nan = float("nan")
    bad = T((4, 4), mx=nan, mn=nan, mean=nan, norm=nan)

    def rank(folder, broken):
        w = T((4, 4), norm=1.0, grad=True)
        data = {
            "Functional.linear.0.forward": synth.api_entry([T((4,), norm=2.0), w], [T((4,), norm=2.0, grad=True)]),
            "Functional.linear.0.backward": {"input": [bad if broken else T((4,), norm=1.0)],
                                             "output": [T((4,), norm=1.0), bad if broken else T((4, 4), norm=0.5)]},
            "Tensor.add_.0.forward": synth.api_entry([w, bad if broken else T((4, 4), norm=0.5)],
                                                     [bad if broken else w]),
        }
        return synth.simple_rank(folder, data, {k: None for k in data},
                                 extra={"dataflow.json": {"Tensor.add_.0.forward": {}}})

    rank(tmp_path / "d", True)
    rank(tmp_path / "b", False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result) == "Functional.linear.0.backward"


def test_first_overflow_in_fixture(tmp_path):
    result = run_graph(str(golden.INPUTS / "npu_stat"), None, str(tmp_path), overflow_check=True, parallel=False,
                       progress=False)
    conn = golden.open_ro(result.path)
    rows = dict(conn.execute("SELECT kind, node_name FROM tbprobe_findings"))
    assert rows == {"first_overflow": "Torch.exp.0.forward"}
    worst = dict(conn.execute("SELECT id, subtree_overflow FROM tbprobe_node_ext"))
    assert worst["NPU_0_0_Module.layers.1.Block.forward.0"] == "critical"
    assert worst["NPU_0_0_Module.layers.0.Block.forward.0"] is None


def test_first_overflow_fixture_rule(tmp_path):
    """The fixture's earlier Tensor.__mul__.1.forward (exec 13) is graded "high" for its x1000 norm ratio, but its
    outputs are finite: the first overflow is Torch.exp.0.forward (exec 14), whose finite inputs give Inf."""
    result = run_graph(str(golden.INPUTS / "npu_stat"), None, str(tmp_path), overflow_check=True, parallel=False,
                       progress=False)
    conn = golden.open_ro(result.path)
    levels = dict(conn.execute("SELECT e.exec_order, n.overflow_level FROM tbprobe_node_ext e JOIN tb_nodes n "
                               "ON n.id = e.id WHERE n.overflow_level IS NOT NULL"))
    assert levels == {13: "high", 14: "critical"}
    row = conn.execute("SELECT node_name, exec_order FROM tbprobe_findings WHERE kind='first_overflow'").fetchone()
    assert tuple(row) == ("Torch.exp.0.forward", 14)


def test_first_overflow_is_earliest_with_finite_inputs(tmp_path):
    """Earliest in execution order among nodes with finite inputs and an Inf/NaN output; nodes with bad inputs
    (inf in and out, or inf in only) or a finite x1000 norm jump come earlier but do not count, and a module that
    completes after its APIs does not win over them. An output whose values are finite but whose float32 Norm or
    Mean overflowed (|x| past about 1.8e19) is not an Inf output: it was, and the operator before the one that
    truly overflowed got the blame."""
    inf, nan = float("inf"), float("nan")
    blk = "Module.blk.Blk.forward.0"
    data = {
        "Torch.jump.0.forward": synth.api_entry([T((4,), norm=1.0)], [T((4,), norm=5000.0)]),
        "Torch.both.0.forward": synth.api_entry([T((4,), mx=inf, norm=inf)], [T((4,), mx=inf, norm=inf)]),
        "Torch.inonly.0.forward": synth.api_entry([T((4,), mn=nan)], [T((4,), norm=1.0)]),
        # finite values whose float32 Norm (or Mean, a sum) overflowed: not an overflow, in or out
        "Torch.norm_only.0.forward": synth.api_entry([T((4,), norm=1.0)], [T((4,), mx=3e38, norm=inf, mean=inf)]),
        "Torch.first.0.forward": synth.api_entry([T((4,), mx=1e38, norm=inf)], [T((4,), mx=nan)]),
        "Torch.second.0.forward": synth.api_entry([T((4,), norm=1.0)], [T((4,), mx=inf, norm=inf)]),
        blk: synth.api_entry([T((4,), norm=1.0)], [T((4,), mx=inf, norm=inf)]),
    }
    under(tmp_path / "d", data, blk)
    result = run_graph(str(tmp_path / "d"), None, str(tmp_path / "o"), overflow_check=True, parallel=False,
                       progress=False)
    conn = golden.open_ro(result.path)
    row = conn.execute("SELECT node_name, exec_order FROM tbprobe_findings WHERE kind='first_overflow'").fetchone()
    assert tuple(row) == ("Torch.first.0.forward", 4)
    levels = dict(conn.execute("SELECT node_name, overflow_level FROM tb_nodes"))
    assert levels["Torch.norm_only.0.forward"] == "high"     # (its x1000 norm jump: inf is not a ratio)
    assert result.summary["first_overflow"] == "step 0 rank 0: Torch.first.0.forward"
    # without -oc no levels are graded and no first overflow is claimed
    plain = run_graph(str(tmp_path / "d"), None, str(tmp_path / "p"), parallel=False, progress=False)
    assert tuple(golden.open_ro(plain.path).execute("SELECT count(*) FROM tbprobe_findings "
                                                    "WHERE kind='first_overflow'").fetchone()) == (0,)


def test_output_file_is_wal_with_big_pages(tmp_path):
    """The bulk-write settings leave a finished file: WAL mode as the reference's, 64 KB pages, nothing beside it."""
    result = run_graph(str(golden.INPUTS / "npu_stat"), str(golden.INPUTS / "bench_stat"), str(tmp_path),
                       parallel=False, progress=False)
    header = open(result.path, "rb").read(100)
    assert header[:16] == b"SQLite format 3\x00"
    assert header[18:20] == b"\x02\x02"          # WAL read/write versions
    assert header[16:18] == b"\x00\x01"          # page size 65536 is stored as 1
    assert [p.name for p in tmp_path.iterdir()] == [result.path.name]


def test_the_summary_names_the_rank_where_a_divergence_starts(tmp_path):
    """Rank 1's linear differs; rank 0 meets the difference in the all_reduce after it. The summary named the
    first rank with a finding (rank 0's all_reduce); it names the finding earliest in its rank's order now."""
    def rank(folder, linear_off, reduced_off):
        data = {
            "Torch.mul.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
            "Functional.linear.0.forward": synth.api_entry([T((4,), norm=2.0)],
                                                           [T((4,), norm=6.0 if linear_off else 2.0)]),
            "Distributed.all_reduce.0.forward": synth.api_entry([T((4,), norm=6.0 if linear_off else 2.0)],
                                                                [T((4,), norm=8.0 if reduced_off else 4.0)]),
        }
        return synth.simple_rank(folder, data, {k: None for k in data})

    for r in (0, 1):
        rank(tmp_path / "d" / "step0" / f"rank{r}", linear_off=r == 1, reduced_off=True)
        rank(tmp_path / "b" / "step0" / f"rank{r}", linear_off=False, reduced_off=False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result, "NPU_0_0") == "Distributed.all_reduce.0.forward"
    assert _finding(result, "NPU_0_1") == "Functional.linear.0.forward"
    assert result.summary["first_divergence"] == "step 0 rank 1: Functional.linear.0.forward"


def test_an_output_the_rules_do_not_judge_is_no_divergence(tmp_path):
    """empty()'s output is uninitialised memory on both sides (1e30 against 1.0): the node rules skip it, and the
    first divergence, which now also counts outputs past the rule's bound, named it ahead of the real error."""
    def rank(folder, bad):
        data = {"Torch.empty.0.forward": {"input_args": [{"type": "int", "value": 4}], "input_kwargs": {},
                                          "output": [T((4,), norm=1e30 if bad else 1.0)]},
                "Torch.mul.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=6.0 if bad else 2.0)])}
        return synth.simple_rank(folder, data, {k: None for k in data})

    rank(tmp_path / "d", True)
    rank(tmp_path / "b", False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result) == "Torch.mul.0.forward"


def test_a_differing_constant_argument_is_where_the_divergence_starts(tmp_path):
    """x * 3.0 against x * 1.0: the multiplication is the only forward error (its constant is flagged, its tensor
    input passes, its output is 200 % off), but the constant failed the "inputs pass" test, so the first
    divergence was a later node (the enclosing module, or a backward record). A differing non-tensor argument
    counts as a differing parameter does: with or without data flow."""
    for flow in (True, False):
        scaled_mlp(tmp_path / f"d{flow}", 3.0, flow)
        scaled_mlp(tmp_path / f"b{flow}", 1.0, flow)
        result = run_graph(str(tmp_path / f"d{flow}"), str(tmp_path / f"b{flow}"), str(tmp_path / f"o{flow}"),
                           parallel=False, progress=False)
        assert _finding(result) == "Tensor.__mul__.0.forward", flow
    # a failing tensor input beside the constant is still carried in: the node is no start then
    scaled_mlp(tmp_path / "d2", 3.0, False)
    doc = json.loads((tmp_path / "d2" / "dump.json").read_text())
    doc["data"]["Tensor.__mul__.0.forward"]["input_args"][0]["Norm"] = 5.0
    (tmp_path / "d2" / "dump.json").write_text(json.dumps(doc))
    result = run_graph(str(tmp_path / "d2"), str(tmp_path / "bFalse"), str(tmp_path / "o2"), parallel=False,
                       progress=False)
    assert _finding(result) != "Tensor.__mul__.0.forward"


@pytest.mark.parametrize("debug_args, bench_args", [
    # F.gelu(x, approximate="tanh") against F.gelu(x): a keyword on one side only, either side
    ({"approximate": {"type": "str", "value": "tanh"}}, {}),
    ({}, {"approximate": {"type": "str", "value": "tanh"}}),
    # F.linear(h, w, None) against F.linear(h, w, b): None against a tensor, either side
    ({"bias": None}, {"bias": T((4,), norm=0.01)}),
    ({"bias": T((4,), norm=0.01)}, {"bias": None}),
])
def test_an_argument_given_on_one_side_only_is_where_the_divergence_starts(tmp_path, debug_args, bench_args):
    """An operator changed by an argument one side alone gives (a keyword the other leaves out, None against a
    tensor) moves its output by 1e-4 and nothing downstream fails: the compare was a pass everywhere and there was
    no first divergence (msprobe flags the keyword's node). The argument's row is an error, the node is where the
    divergence starts, and the fast path hands such a pair to the general one, so both say the same."""
    def rank(folder, args, out_norm):
        data = {
            "Torch.a.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
            "Functional.gelu.0.forward": {"input_args": [T((4,), norm=2.0)], "input_kwargs": args,
                                          "output": [T((4,), norm=out_norm)]},
            "Torch.b.0.forward": synth.api_entry([T((4,), norm=out_norm)], [T((4,), norm=out_norm)]),
        }
        return synth.simple_rank(folder, data, {k: None for k in data})

    rank(tmp_path / "d", debug_args, 1.0001)
    rank(tmp_path / "b", bench_args, 1.0)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result) == "Functional.gelu.0.forward"
    conn = golden.open_ro(result.path)
    rows = dict(conn.execute("SELECT node_name, precision_index FROM tb_nodes WHERE data_source = 'NPU'"))
    text = conn.execute("SELECT input_data || output_data FROM tb_nodes WHERE node_name = "
                        "'Functional.gelu.0.forward' AND data_source = 'NPU'").fetchone()[0]
    assert rows["Functional.gelu.0.forward"] == 1 and rows["Torch.b.0.forward"] == 0
    assert "given on one side only" in text


def test_the_first_overflow_skips_an_inf_argument_and_what_the_bench_makes_too(tmp_path):
    """A causal mask's masked_fill(mask, -inf) turns finite inputs into -inf on both sides (critical, from its
    fill argument), and so does an op both sides overflow in identically; the debug run's NaN starts at log(x) of
    a finite x, later. The first overflow was the mask. Their levels stay critical."""
    inf, nan = float("inf"), float("nan")

    def rank(folder, broken):
        neg = T((4, 4), mn=-inf, mean=-inf, norm=inf)
        neg["inf_count"] = 6
        same = T((4,), mx=inf, norm=inf)
        same["inf_count"] = 1
        data = {
            "Tensor.masked_fill.0.forward": synth.api_entry(
                [T((4, 4)), T((4, 4), dtype="torch.bool"), {"type": "float", "value": -inf}], [neg]),
            "Torch.exp.0.forward": synth.api_entry([T((4,), mx=100.0)], [same]),
            "Torch.log.0.forward": synth.api_entry([T((4,), mn=-1.0 if broken else 0.5)],
                                                   [T((4,), mn=nan, mean=nan, norm=nan) if broken else T((4,))]),
        }
        return synth.simple_rank(folder, data, {k: None for k in data})

    rank(tmp_path / "d", True)
    rank(tmp_path / "b", False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), overflow_check=True,
                       parallel=False, progress=False)
    conn = golden.open_ro(result.path)
    row = conn.execute("SELECT node_name FROM tbprobe_findings WHERE kind='first_overflow'").fetchone()
    assert row[0] == "Torch.log.0.forward"
    levels = dict(conn.execute("SELECT node_name, overflow_level FROM tb_nodes WHERE data_source='NPU'"))
    assert levels["Tensor.masked_fill.0.forward"] == levels["Torch.exp.0.forward"] == "critical"
    # the same exp on the debug side alone (the bench finite there) is where the overflow starts
    rank(tmp_path / "b2", False)
    doc = json.loads((tmp_path / "b2" / "dump.json").read_text())
    doc["data"]["Torch.exp.0.forward"]["output"] = [T((4,))]
    (tmp_path / "b2" / "dump.json").write_text(json.dumps(doc))
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b2"), str(tmp_path / "o2"), overflow_check=True,
                       parallel=False, progress=False)
    assert result.summary["first_overflow"] == "step 0 rank 0: Torch.exp.0.forward"
    # without a bench the fill argument's -inf is still skipped
    result = run_graph(str(tmp_path / "d"), None, str(tmp_path / "o3"), overflow_check=True, parallel=False,
                       progress=False)
    assert result.summary["first_overflow"] == "step 0 rank 0: Torch.exp.0.forward"


def test_at_l0_an_input_no_recorded_call_made_is_no_leaf_weight(tmp_path):
    """At L0 a weight is a module's parameter, never an argument: an input no recorded module made (the MLP's
    own `h * 3` between its two Linears) that requires grad was taken for a leaf weight, and the second Linear,
    its input 200 % off, named the first divergence instead of the MLP around it."""
    mlp = "Module.mlp.MLP.forward.0"

    def rank(folder, w):
        data = {
            "Module.mlp.fc.Linear.forward.0": dict(
                synth.api_entry([T((4,), norm=2.0, grad=True)], [T((4,), norm=2.0, grad=True)]),
                parameters={"weight": T((4, 4), norm=1.0, grad=True)}),
            "Module.mlp.out.Linear.forward.0": dict(
                synth.api_entry([T((4,), norm=2.0 * w, grad=True)], [T((4,), norm=1.0 * w, grad=True)]),
                parameters={"weight": T((4, 4), norm=1.0, grad=True)}),
            mlp: synth.api_entry([T((4,), norm=2.0, grad=True)], [T((4,), norm=1.0 * w, grad=True)]),
        }
        construct = {"Module.mlp.fc.Linear.forward.0": mlp, "Module.mlp.out.Linear.forward.0": mlp, mlp: None}
        doc = synth.simple_rank(folder, data, construct, extra={"dataflow.json": {mlp: {}}})
        d = json.loads((folder / "dump.json").read_text())
        d["level"] = "L0"
        (folder / "dump.json").write_text(json.dumps(d))
        return doc

    rank(tmp_path / "d", 3.0)
    rank(tmp_path / "b", 1.0)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result) == mlp


def test_an_input_reached_through_an_unrecorded_view_is_no_leaf_weight(tmp_path):
    """linear(y.view(...), w): the view is recorded without data flow, so the linear's failing input (200 % off,
    requires grad) had no producer and counted as a leaf weight: the linear was named the first divergence
    though its input is carried in. An input whose Max and Min are an earlier output's (Mean and Norm to 1e-4, a
    reshape sums in another order) is that output's, not a leaf."""
    def rank(folder, broken):
        y = T((2, 4), mx=3.0 if broken else 1.0, mn=-1.0, mean=0.5 if broken else 0.0,
              norm=6.0 if broken else 2.0, grad=True)
        viewed = dict(y, shape=[8], Mean=y["Mean"] * (1 + 1e-7))
        data = {
            # (a: 30 % off with passing inputs, under the 50 % bound: no candidate)
            "Torch.a.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.6 if broken else 2.0,
                                                                           grad=True)]),
            # (b: its failing input comes from a, carried in)
            "Torch.b.0.forward": synth.api_entry([T((4,), norm=2.6 if broken else 2.0, grad=True)], [y]),
            "Functional.linear.0.forward": synth.api_entry([viewed, T((8, 8), norm=1.0, grad=True)],
                                                           [T((8,), norm=3.0 if broken else 1.0, grad=True)]),
        }
        extra = {"dataflow.json": {"Torch.b.0.forward": {"0": "Torch.a.0.forward"}}}
        return synth.simple_rank(folder, data, {k: None for k in data}, extra=extra)

    rank(tmp_path / "d", True)
    rank(tmp_path / "b", False)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _finding(result) == "Torch.b.0.forward"   # (none starts there: the earliest diverging node)


def _detail(result, graph_id="NPU_0_0"):
    conn = golden.open_ro(result.path)
    row = conn.execute("SELECT detail FROM tbprobe_findings WHERE graph_id=? AND kind='first_divergence'",
                       (graph_id,)).fetchone()
    return json.loads(row[0])


def test_the_first_divergence_says_why_it_was_chosen(tmp_path):
    """The page went to a first divergence drawn as passing (precision 0, every row pass: its weight differs, so the
    reference's rule lets its output be 200 % off) with no word why. The detail now holds the rule that chose the
    node, whether its own precision flagged it, its worst output figure and, where the difference enters at a
    failing input, which inputs those are."""
    def weighted(folder, w):
        fc = "Module.fc.Linear.forward.0"
        data = {"Module.inp.Linear.forward.0": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)]),
                fc: dict(synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * w)]),
                         parameters={"weight": T((4, 4), norm=1.0 * w, grad=True)})}
        return synth.simple_rank(folder, data, {k: None for k in data})

    weighted(tmp_path / "d", 3.0)
    weighted(tmp_path / "b", 1.0)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    detail = _detail(result)
    assert detail["rule"] == "inputs_pass" and detail["flagged"] is False and detail["enters"] == []
    assert detail["worst_output"] == {"metric": "NormRelativeErr", "value": pytest.approx(200.0)}
    assert detail["precision_index"] == 0 and detail["path"][-1] == "Module.fc.Linear.forward.0"
    # x * 3.0 against x * 1.0: the constant argument fails, and is where the difference enters
    scaled_mlp(tmp_path / "d2", 3.0, False)
    scaled_mlp(tmp_path / "b2", 1.0, False)
    result = run_graph(str(tmp_path / "d2"), str(tmp_path / "b2"), str(tmp_path / "o2"), parallel=False,
                       progress=False)
    detail = _detail(result)
    assert detail["rule"] == "difference_enters" and detail["flagged"] is True
    assert detail["enters"] == [{"slot": "1", "kind": "argument"}]
    assert detail["worst_output"]["value"] == pytest.approx(200.0)
    # at L1 a weight is an operator's argument: a leaf that trains, where the difference enters
    _l1_rank(tmp_path / "d3", True)
    _l1_rank(tmp_path / "b3", False)
    result = run_graph(str(tmp_path / "d3"), str(tmp_path / "b3"), str(tmp_path / "o3"), parallel=False,
                       progress=False)
    detail = _detail(result)
    assert detail["rule"] == "difference_enters" and detail["enters"] == [{"slot": "1", "kind": "leaf"}]


def test_a_graph_with_warnings_alone_names_its_first_warning(tmp_path):
    """No error and no output past the 50 % bound, but warnings (a small difference: bf16 for one layer, a weight a
    few percent off): the summary said "first divergent node: none" and the page "No divergence found.", where
    msprobe's graph of the same dumps, opened in the plugin, named its earliest warning."""
    def rank(folder, amplified):
        data = {"Torch.a.0.forward": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * (1 + 2e-4))]),
                "Torch.b.0.forward": synth.api_entry([T((4,), norm=2.0 * (1 + 2e-4))],
                                                     [T((4,), norm=2.0 * (1 + amplified))]),
                "Module.blk.Blk.forward.0": synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0 * (1 + amplified))])}
        under(folder, data, "Module.blk.Blk.forward.0")

    rank(tmp_path / "d", 2.7e-3)   # a's output 0.02 % off, carried into b, whose output is 0.27 % off: 13.5 times
    bench = tmp_path / "b"
    data = {name: synth.api_entry([T((4,), norm=2.0)], [T((4,), norm=2.0)])
            for name in ("Torch.a.0.forward", "Torch.b.0.forward", "Module.blk.Blk.forward.0")}
    under(bench, data, "Module.blk.Blk.forward.0")
    result = run_graph(str(tmp_path / "d"), str(bench), str(tmp_path / "o"), parallel=False, progress=False)
    conn = golden.open_ro(result.path)
    prec = dict(conn.execute("SELECT node_name, precision_index FROM tb_nodes WHERE data_source='NPU'"))
    # (the module's inputs match exactly: its 0.27 % is short of the 10 % asked for over exact inputs)
    assert prec == {"Torch.a.0.forward": 0, "Torch.b.0.forward": 0.5, "Module.blk.Blk.forward.0": 0,
                    "DefaultModel": None}
    assert result.summary["first_divergence"] == "step 0 rank 0: Torch.b.0.forward"
    (detail,), = conn.execute("SELECT detail FROM tbprobe_findings WHERE kind='first_divergence'")
    assert json.loads(detail)["rule"] == "inputs_pass"


def _ops_rank(folder, outputs):
    data = {name: synth.api_entry([T((2, 4))], [T((2, 4), norm=norm)]) for name, norm in outputs}
    synth.simple_rank(folder, data, {k: None for k in data})


def test_a_warning_never_outranks_another_ranks_error_in_the_same_step(tmp_path):
    """Rank 0 errs at its third call, rank 1 has only a 20 % warning at its first: the summary (and the plugin's
    run_first_divergence) named rank 1's warning, earlier in its execution order, once warnings could be a first
    divergence. Within a step a warning-only finding comes after every rank's error; the summary says when the
    finding is a warning alone (the reference's tenfold rule warns on tiny amplifications: it may be noise)."""
    calls = ("Torch.relu.0.forward", "Torch.tanh.0.forward", "Torch.exp.0.forward")
    for side in ("d", "b"):
        for rank in (0, 1):
            norms = [2.0, 2.0, 2.0]
            if side == "d":
                norms[2 if rank == 0 else 0] = 4.0 if rank == 0 else 2.4
            _ops_rank(tmp_path / side / "step0" / f"rank{rank}", zip(calls, norms))
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert result.summary["first_divergence"] == "step 0 rank 0: Torch.exp.0.forward"
    assert "a warning: no node" not in result.summary_text()
    import os

    from tests.tb_plugin.conftest import make_api
    status, body = make_api(tmp_path / "o").get("/api/findings", run=".", file=os.path.basename(result.path), step=0,
                                                rank=1)
    assert status == 200 and body["first_divergence"]["name"] == "Torch.relu.0.forward"   # (rank 1's own)
    assert body["run_first_divergence"]["rank"] == 0 and body["run_first_divergence"]["name"] == "Torch.exp.0.forward"
    # rank 1's warning alone: the run's first divergence, said to be a warning
    alone = run_graph(str(tmp_path / "d" / "step0" / "rank1"), str(tmp_path / "b" / "step0" / "rank1"),
                      str(tmp_path / "o2"), parallel=False, progress=False)
    assert alone.summary["first_divergence"] == "step 0 rank 1: Torch.relu.0.forward"
    assert "Torch.relu.0.forward (a warning: no node of that step is an error)" in alone.summary_text()
