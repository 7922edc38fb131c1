"""The in-place backward repair gives the same tree as msprobe graph_visualize (the reference) on a dump whose
backward calls landed under an in-place ReLU."""
import glob
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import synth

PEERS = Path(os.environ.get("PEERS_DIR", "/tmp/peers"))
MSPROBE = PEERS / "msprobe" / "bin" / "msprobe"

pytestmark = pytest.mark.peers


def _parents(db: str) -> dict:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT node_name, up_node FROM tb_nodes WHERE data_source = 'NPU'").fetchall())
    finally:
        con.close()


def test_inplace_repair_matches_the_reference(tmp_path):
    if not MSPROBE.exists():
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")
    b = "Module.layer4.1"
    construct = {
        f"{b}.BasicBlock.forward.0": None,
        f"{b}.conv1.Conv2d.forward.0": f"{b}.BasicBlock.forward.0",
        f"{b}.relu.ReLU.forward.0": f"{b}.BasicBlock.forward.0",
        f"{b}.conv2.Conv2d.forward.0": f"{b}.BasicBlock.forward.0",
        f"{b}.relu.ReLU.forward.1": f"{b}.BasicBlock.forward.0",
        f"{b}.BasicBlock.backward.0": None,
        f"{b}.relu.ReLU.backward.1": f"{b}.BasicBlock.backward.0",
        # recorded under the in-place ReLU's backward call: wrong, both tools move it
        f"{b}.conv2.Conv2d.backward.0": f"{b}.relu.ReLU.backward.1",
        f"{b}.relu.ReLU.backward.0": f"{b}.BasicBlock.backward.0",
        f"{b}.conv1.Conv2d.backward.0": f"{b}.relu.ReLU.backward.0",
    }
    rank = synth.simple_rank(tmp_path / "dump" / "step0" / "rank0", {n: synth.api_entry() for n in construct},
                             construct)
    ours = run_graph(str(rank), None, str(tmp_path / "ours"), progress=False)
    out = tmp_path / "ref"
    out.mkdir()
    proc = subprocess.run([str(MSPROBE), "graph_visualize", "-tp", str(rank), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    dbs = glob.glob(str(out / "*.vis.db"))
    assert proc.returncode == 0 and len(dbs) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    theirs = _parents(dbs[0])
    mine = _parents(str(ours.path))
    assert mine[f"{b}.conv2.Conv2d.backward.0"] == f"{b}.BasicBlock.backward.0"
    assert mine[f"{b}.conv1.Conv2d.backward.0"] == f"{b}.BasicBlock.backward.0"
    assert {n: mine[n] for n in theirs} == theirs
