"""Interop with the reference: a dump dir written by tbprobe's writers is accepted by `msprobe graph_visualize`,
and the graph it builds is row for row the one it built from its own dump (tests/fixtures outputs/build)."""
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tbprobe.formats.construct_json import load_construct, write_construct
from tbprobe.formats.dump_json import DumpWriter, load_dump
from tbprobe.formats.stack_json import load_stack, write_stack

from .conftest import REF

MSPROBE = Path(os.environ.get("PEERS_DIR", "/tmp/peers")) / "msprobe" / "bin" / "msprobe"


@pytest.mark.peers
@pytest.mark.slow
def test_msprobe_builds_the_same_graph_from_a_tbprobe_written_dump(tmp_path):
    if not MSPROBE.exists():
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")
    src = REF / "inputs/npu_stat/step0/rank0"
    rank = tmp_path / "dump" / "step0" / "rank0"
    dump = load_dump(src / "dump.json")
    with DumpWriter(rank / "dump.json", dump.task, dump.level, dump.framework, dump.dump_data_dir) as w:
        for name, entry in dump.entries.items():
            w.add(name, entry)
    write_construct(rank / "construct.json", load_construct(src / "construct.json").parents)
    stacks = load_stack(src / "stack.json")
    write_stack(rank / "stack.json", {name: stacks.get(name) for name in stacks.by_name})

    out = tmp_path / "out"
    res = subprocess.run([str(MSPROBE), "graph_visualize", "-tp", str(tmp_path / "dump"), "-o", str(out), "-oc"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    built = sorted(out.glob("build_*.vis.db"))
    assert len(built) == 1
    ours = sqlite3.connect(built[0])
    ref_db = next(REF.glob("outputs/build/build_*.vis.db"))
    theirs = sqlite3.connect(f"file:{ref_db}?mode=ro&immutable=1", uri=True)
    assert ours.execute("SELECT count(*) FROM tb_nodes").fetchone()[0] == 48
    for table in ("tb_nodes", "tb_stack", "tb_config"):
        mine = ours.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
        assert mine == theirs.execute(f"SELECT * FROM {table} ORDER BY id").fetchall(), table
