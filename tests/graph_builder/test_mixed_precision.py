"""An fp32 run against a bf16 / fp16 run of the example GPT (real CPU training, collected by tbprobe at mix): the
dtype difference of every operator autocast runs in bf16 is mixed precision, graded by the numbers with a note
(before, each was "The dtype of NPU differs" and the first bf16 linear the first divergence); `strict_dtype`
keeps the reference's grading. A planted defect in the low-precision run is still named: a weight 5 % off, an
fp16 overflow to inf."""
import glob
import subprocess
import sys
from pathlib import Path

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples")

SCRIPT = """
import json, os, sys
sys.path.insert(0, %r)
import torch, torch.nn.functional as F
from train_gpt import GPT, make_batch
from tbprobe import PrecisionDebugger, seed_all
out, mode, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
seed_all(1234, mode=True)
model = GPT(dropout=0.0)
if scale != 1.0:   # the planted defect: one layer's weight (blocks.1.mlp.fc)
    with torch.no_grad():
        model.blocks[1].mlp.fc.weight.mul_(scale)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
cfg = {"task": "statistics", "dump_path": out, "rank": [], "step": [0], "level": "mix",
       "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
json.dump(cfg, open(out + ".json", "w"))
dbg = PrecisionDebugger(config_path=out + ".json")
x, y = make_batch(0, 4, 16, 64)
dbg.start(model=model)
if mode == "fp32":
    logits = model(x)
else:
    with torch.autocast("cpu", dtype=torch.bfloat16 if mode == "bf16" else torch.float16):
        logits = model(x)
loss = F.cross_entropy(logits.float().view(-1, 64), y.reshape(-1))
opt.zero_grad(); loss.backward(); opt.step()
dbg.stop(); dbg.step()
""" % EXAMPLES

RUNS = {"fp32": ("fp32", "1"), "bf16": ("bf16", "1"), "bf16_weight": ("bf16", "1.05"),
        "fp16_inf": ("fp16", "100000")}
PLANTED = "Functional.linear.6.forward"   # blocks.1.mlp.fc's linear


@pytest.fixture(scope="module")
def dumps(tmp_path_factory, collector_importable):
    base = tmp_path_factory.mktemp("mixed")
    out = {}
    for name, (mode, scale) in RUNS.items():
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(base / name), mode, scale], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-500:]
        found = glob.glob(str(base / name / "step0" / "*" / "dump.json"))
        assert len(found) == 1, found
        out[name] = found[0].rsplit("/", 1)[0]
    return out


def _graph(dumps, debug, tmp_path, **kw):
    result = run_graph(dumps[debug], dumps["fp32"], str(tmp_path / debug), overflow_check=True, parallel=False,
                       progress=False, **kw)
    conn = golden.open_ro(result.path)
    rows = conn.execute("SELECT node_name, precision_index, input_data || output_data FROM tb_nodes "
                        "WHERE graph_id = 'NPU_0_0'").fetchall()
    return result.summary, rows


def test_a_healthy_bf16_run_has_no_error_and_says_why_its_dtypes_differ(dumps, tmp_path):
    summary, rows = _graph(dumps, "bf16", tmp_path)
    assert summary["error"] == 0 and summary["pass"] > 100
    noted = [name for name, _, text in rows if "mixed precision" in text]
    assert "Functional.linear.0.forward" in noted and len(noted) > 30
    assert not any("error: The dtype of NPU differs" in text for _, _, text in rows)
    # a healthy run names no error: nothing, or a warning said to be one
    assert summary["first_divergence"] is None or summary["first_divergence_warning_only"]
    assert summary["first_overflow"] is None


def test_strict_dtype_grades_as_the_reference(dumps, tmp_path):
    summary, rows = _graph(dumps, "bf16", tmp_path, strict_dtype=True)
    assert summary["error"] > 30
    assert "Functional.linear.0.forward" in summary["first_divergence"]
    assert not any("mixed precision" in text for _, _, text in rows)


def test_a_weight_5_percent_off_in_the_bf16_run_is_named(dumps, tmp_path):
    summary, _ = _graph(dumps, "bf16_weight", tmp_path)
    assert summary["error"] == 0   # (5 % is under every rule's bound)
    assert summary["first_divergence"] == f"step 0 rank 0: {PLANTED}"
    assert summary["first_divergence_in"] == "Module.blocks.1.mlp.fc.Linear.forward.0"
    assert summary["first_divergence_weight"] and not summary["first_divergence_warning_only"]


def test_an_fp16_overflow_is_named(dumps, tmp_path):
    summary, rows = _graph(dumps, "fp16_inf", tmp_path)
    assert summary["first_overflow"] == f"step 0 rank 0: {PLANTED}"
    assert summary["first_divergence"] == f"step 0 rank 0: {PLANTED}"
    planted = next(p for name, p, _ in rows if name == PLANTED)
    assert planted == 1


@pytest.mark.parametrize("strict", [False, True])
def test_the_command_lines_take_strict_dtype(dumps, tmp_path, strict):
    flag = ["--strict-dtype"] if strict else []
    base = [sys.executable, "-m", "tbprobe.graph_builder"]
    graph = subprocess.run(base + ["graph", "-tp", dumps["bf16"], "-gp", dumps["fp32"], "-q", "-o",
                                   str(tmp_path / "g")] + flag, capture_output=True, text=True, timeout=120)
    assert graph.returncode == 0, graph.stderr
    errors = int(graph.stdout.split(" error ", 1)[1].split(",", 1)[0])
    assert (errors > 30) if strict else (errors == 0), graph.stdout
    table = subprocess.run(base + ["compare", "-tp", dumps["bf16"], "-gp", dumps["fp32"], "-o", str(tmp_path / "t")]
                           + flag, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    import csv
    (path,) = glob.glob(str(tmp_path / "t" / "compare_result_*.csv"))
    with open(path, newline="") as f:
        rows = {r["NPU Name"]: r for r in csv.DictReader(f)}
    row = rows["Functional.linear.0.forward.output.0"]
    assert (row["NPU Dtype"], row["Bench Dtype"]) == ("torch.bfloat16", "torch.float32")
    if strict:
        assert row["Result"] == "error" and "The dtype of NPU differs" in row["Err_message"]
    else:
        assert row["Result"] == "pass" and "mixed precision" in row["Err_message"]
