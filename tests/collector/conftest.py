import glob
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

PEER_PYTHON = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "python")
PEER_MSPROBE = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "msprobe")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(script: str, args, cwd, ranks=(0, 1)):
    """A gloo job of len(ranks) ranks, one `python -c script *args` process per rank (RANK, WORLD_SIZE, MASTER_*
    set, a free port), started in the order of `ranks`; stdout and stderr piped, as text."""
    port = free_port()
    procs = []
    for rank in ranks:
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(ranks)), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-c", script, *args], env=env, cwd=cwd,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def vis_nodes(db: str, columns, side: str = "NPU") -> dict:
    """{node name: (its `columns` of tb_nodes)} of one side (data_source) of the .vis.db `db`."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(f"SELECT node_name, {', '.join(columns)} FROM tb_nodes WHERE data_source = ?",
                           (side,)).fetchall()
    finally:
        con.close()
    return {r[0]: tuple(r[1:]) for r in rows}


def need_peers():
    if not (os.path.exists(PEER_PYTHON) and os.path.exists(PEER_MSPROBE)):
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")


def rank_dirs(dump_path, step=0):
    return sorted(glob.glob(os.path.join(dump_path, f"step{step}", "*")))


def load_rank(rank_dir):
    out = {}
    for name in ("dump", "construct", "stack"):
        with open(os.path.join(rank_dir, f"{name}.json")) as f:
            out[name] = json.load(f)
    return out


def stack_lines(stack_doc: dict, until: str = "") -> dict:
    """{record name: its lines} of a stack.json document (new form), each file's path from site-packages/ on, so
    that two interpreters' stacks compare; with `until` (a pattern), each stack cut after its first line matching
    it (the frames above a training function the two tools reach from different entry points)."""
    out = {}
    for names, lines in stack_doc.values():
        kept = []
        for line in lines:
            kept.append(re.sub(r"^File .*/site-packages/", "File ", line))
            if until and re.search(until, line):
                break
        out.update((n, kept) for n in names)
    return out


def dump_of(tmp_path, step=0):
    return load_rank(rank_dirs(str(tmp_path / "dump"), step)[0])


def make_debugger(tmp_path, level="mix", steps=1, summary_mode="statistics", task="statistics", **block):
    from run_model import config

    from tbprobe import PrecisionDebugger

    cfg = config(str(tmp_path / "dump"), level, summary_mode, steps, task)
    if block:
        cfg.setdefault(task, {}).update(block)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return PrecisionDebugger(config_path=str(path))


@pytest.fixture
def debugger_factory(tmp_path):
    made = []

    def factory(**kw):
        d = make_debugger(tmp_path, **kw)
        made.append(d)
        return d

    yield factory
    for d in made:
        d.close()
