"""Real dumps from tbprobe's own collector (a small CNN trained 2 steps on CPU): step 0 against step 1 matches
all but < 1 % of nodes, and the collector's data-flow side file becomes tbprobe_edges."""
import json
import subprocess
import sys
import textwrap

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch, torch.nn as nn, torch.nn.functional as F
    from tbprobe import PrecisionDebugger
    out = sys.argv[1]
    cfg = {"task": "statistics", "dump_path": out, "rank": [], "step": [0, 1], "level": "mix",
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    json.dump(cfg, open(out + "_config.json", "w"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = PrecisionDebugger(config_path=out + "_config.json")
    for step in range(2):
        x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))
        dbg.start(model=model)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        dbg.stop(); dbg.step()
""")


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, collector_importable):
    out = tmp_path_factory.mktemp("dump") / "run"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=300)
    # (a failure, not a skip: the collector is importable, so a run that does not finish is tbprobe's bug)
    assert proc.returncode == 0 and (out / "step1").is_dir(), proc.stderr[-800:]
    return out


def test_step0_against_step1(two_steps, tmp_path):
    result = run_graph(str(two_steps / "step0"), str(two_steps / "step1"), str(tmp_path), parallel=False,
                       progress=False)
    s = result.summary
    assert s["nodes"] > 20
    assert s["unmatched"] <= 0.01 * s["nodes"]
    assert s["matched"] >= 0.99 * (s["nodes"] - 1)


def test_dataflow_edges_from_collector(two_steps, tmp_path):
    rank = next((two_steps / "step0").iterdir())
    flow_file = rank / "dataflow.json"
    assert flow_file.exists()
    flow = json.loads(flow_file.read_text())
    result = run_graph(str(rank), None, str(tmp_path), parallel=False, progress=False)
    edges = {tuple(r) for r in golden.open_ro(result.path).execute("SELECT src, dst, dst_slot FROM tbprobe_edges")}
    expected = {(p, c, s) for c, slots in flow.items() for s, p in slots.items()}
    assert edges == expected and edges
