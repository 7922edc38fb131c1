"""One side making extra calls (real dumps from tbprobe's collector, a two-block model trained one step on CPU):
the debug run calls one block again and runs sigmoid().sum() before opt.step(), the rest identical. The extra calls
shift the counters of every later reshape and sum and the number of every later group of top-level calls
(Apis_Between_Modules.N); pairing by those names linked the extra calls to the bench's later ones, a false error
named the first divergence. Only the extra calls may stay unmatched."""
import json
import subprocess
import sys
import textwrap

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden

SCRIPT = textwrap.dedent("""
    import sys
    import torch, torch.nn as nn
    from tbprobe import PrecisionDebugger, seed_all
    mode, out = sys.argv[1:3]
    seed_all(1)
    class Blk(nn.Module):
        def __init__(self):
            super().__init__(); self.fc = nn.Linear(8, 8)
        def forward(self, x):
            return self.fc(x).reshape(-1, 8)
    class Net(nn.Module):
        def __init__(self):
            super().__init__(); self.a = Blk(); self.b = Blk()
        def forward(self, x):
            return self.b(self.a(x))
    model = Net(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = PrecisionDebugger(dump_path=out, task="statistics", level="mix")
    x = torch.randn(4, 8)
    extra = torch.randn(4, 8), torch.randn(3)
    dbg.start(model=model)
    h = model(x)
    h.sum().backward()
    if mode == "debug":
        with torch.no_grad():
            _ = model.a(extra[0])
            _ = torch.sigmoid(extra[1]).sum()
    opt.step()
    t = h.detach().reshape(32)
    u = torch.tanh(t).sum()
    dbg.stop(); dbg.step()
""")

EXTRA = {"Module.a.Blk.forward.1", "Module.a.fc.Linear.forward.1", "Functional.linear.2.forward",
         "Tensor.reshape.2.forward", "Apis_Between_Modules.1", "Torch.sigmoid.0.forward", "Tensor.sum.1.forward"}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory, collector_importable):
    root = tmp_path_factory.mktemp("extra")
    for mode in ("debug", "bench"):
        proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(root / mode)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-500:]
    return root


def _links(path, side):
    return {n["node_name"]: (json.loads(n["matched_node_link"]) or [None])[-1]
            for n in golden.nodes(path).values() if n["data_source"] == side}


def test_only_the_extra_calls_stay_unmatched(dumps, tmp_path):
    result = run_graph(str(dumps / "debug"), str(dumps / "bench"), str(tmp_path), parallel=False, progress=False)
    links = _links(result.path, "NPU")
    assert {name for name, twin in links.items() if twin is None} == EXTRA
    # the real counterparts, their counters shifted by the extra calls
    assert links["Apis_Between_Modules.2"] == "Apis_Between_Modules.1"
    assert links["Tensor.reshape.3.forward"] == "Tensor.reshape.2.forward"
    assert links["Torch.tanh.0.forward"] == "Torch.tanh.0.forward"
    assert links["Tensor.sum.2.forward"] == "Tensor.sum.1.forward"
    assert all(twin is not None for twin in _links(result.path, "Bench").values())
    s = result.summary
    assert s["error"] == 0 and s["first_divergence"] is None
    assert s["unmatched"] == len(EXTRA) and s["bench_unmatched"] == 0


def test_the_bench_only_nodes_are_counted(dumps, tmp_path):
    """Sides swapped: the extra calls are the bench's; the summary counted unmatched debug nodes only and said
    `unmatched 0`."""
    result = run_graph(str(dumps / "bench"), str(dumps / "debug"), str(tmp_path), parallel=False, progress=False)
    s = result.summary
    assert s["unmatched"] == 0 and s["bench_unmatched"] == len(EXTRA)
    assert f"unmatched 0, bench-only {len(EXTRA)}" in result.summary_text()
    assert s["first_divergence"] is None


def test_without_the_aligner_names_pair_as_the_reference_does(dumps, tmp_path):
    result = run_graph(str(dumps / "debug"), str(dumps / "bench"), str(tmp_path), parallel=False, progress=False,
                       align=False)
    links = _links(result.path, "NPU")
    assert links["Apis_Between_Modules.1"] == "Apis_Between_Modules.1"
    assert result.summary["first_divergence"] is not None
