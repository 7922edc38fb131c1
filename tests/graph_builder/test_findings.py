"""Roll-up, first divergence, first overflow and data-flow edges (tbprobe's own tables)."""
import json

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden, synth

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
    construct = {k: blk for k in data if k != blk}
    construct[blk] = None
    extra = {"dataflow.json": {"Torch.b.0.forward": {"0": "Torch.a.0.forward"},
                               "Torch.c.0.forward": {"0": "Torch.b.0.forward"}}} if flow else None
    return synth.simple_rank(folder, data, construct, extra=extra)


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
    sub = dict(conn.execute("SELECT id, subtree_precision FROM tbprobe_node_ext"))
    assert sub["NPU_0_0_Module.blk.Blk.forward.0"] == 1
    assert sub["NPU_0_0_DefaultModel"] == 1
    assert sub["NPU_0_0_Torch.a.0.forward"] == 0
    edges = set(tuple(r) for r in conn.execute("SELECT src, dst, dst_slot FROM tbprobe_edges WHERE graph_id='NPU_0_0'"))
    assert edges == {("Torch.a.0.forward", "Torch.b.0.forward", "0"), ("Torch.b.0.forward", "Torch.c.0.forward", "0")}


def test_first_overflow_in_fixture(tmp_path):
    result = run_graph(str(golden.INPUTS / "npu_stat"), None, str(tmp_path), overflow_check=True, parallel=False,
                       progress=False)
    conn = golden.open_ro(result.path)
    rows = dict(conn.execute("SELECT kind, node_name FROM tbprobe_findings"))
    assert rows == {"first_overflow": "Torch.exp.0.forward"}
    worst = dict(conn.execute("SELECT id, subtree_overflow FROM tbprobe_node_ext"))
    assert worst["NPU_0_0_Module.layers.1.Block.forward.0"] == "critical"
    assert worst["NPU_0_0_Module.layers.0.Block.forward.0"] is None
