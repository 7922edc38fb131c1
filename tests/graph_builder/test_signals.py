"""Signals to a `tbprobe graph` whose row helper is at work: one line and the signal's exit code, nothing from the
helper, no temporary file left (the .vis.db's, the helper's database), no helper left running. And a helper
killed on its own is an error, not a wait for ever.

The helper is forced (no minimum size, no idle-core condition) and held at work after its rows, so the signal
reliably finds it running; each case is a real child process, a second or so."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import os, sys, time
from tbprobe.graph_builder import engine, run
run.SPLIT_IDLE = 0          # share the rows with the helper whatever the cores are doing
engine.SPLIT_MIN_NODES = 10
marker = sys.argv[1]
rows = engine._helper_rows
def held_helper(temp_db):
    out = rows(temp_db)
    with open(marker + ".part", "w") as f:
        f.write(f"{os.getpid()} {temp_db}")
    os.rename(marker + ".part", marker)
    time.sleep(60)
    return out
engine._helper_rows = held_helper
from tbprobe.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _dump(folder: Path, n: int = 200) -> Path:
    rank = folder / "step0" / "rank0"
    rank.mkdir(parents=True)
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3, 4], "Max": 1.5, "Min": -1.0,
            "Mean": 0.1, "Norm": 2.0, "requires_grad": False}
    data = {f"Functional.linear.{i}.forward": {"input_args": [item, item], "input_kwargs": {}, "output": [item]}
            for i in range(n)}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                "dump_data_dir": None, "data": data}))
    (rank / "construct.json").write_text(json.dumps({k: None for k in data}))
    (rank / "stack.json").write_text("{}")
    return folder


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _run(tmp_path: Path, send) -> tuple:
    """Start the command, wait until the helper holds its rows, `send(process, helper_pid)`; returns (exit code,
    stderr, helper pid)."""
    (tmp_path / "driver.py").write_text(DRIVER)
    dump = _dump(tmp_path / "dump")
    temp = tmp_path / "tmp"
    temp.mkdir()
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(marker), "graph", "-tp", str(dump),
                             "-gp", str(dump), "-o", str(tmp_path / "out"), "-q"], cwd=ROOT,
                            env=dict(os.environ, TMPDIR=str(temp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        pid = int(marker.read_text().split()[0])
        time.sleep(0.1)
        send(proc, pid)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the helper outlived the command"
    assert not (tmp_path / "out").exists(), list((tmp_path / "out").iterdir())
    assert list(temp.iterdir()) == []   # (the helper's database)
    return proc.returncode, err, pid


@pytest.mark.parametrize("signum,group,code,line", [
    (signal.SIGTERM, False, 143, "tbprobe: terminated"),       # the helper printed its own traceback first
    (signal.SIGINT, True, 130, "tbprobe: interrupted"),        # Ctrl-C: a stray "Process ForkPoolWorker-1:"
    (signal.SIGHUP, False, 129, "tbprobe: terminated (hangup)"),   # killed outright, temporary files left
    (signal.SIGHUP, True, 129, "tbprobe: terminated (hangup)"),    # (a terminal that closes)
])
def test_a_signal_stops_the_run_quietly_and_leaves_nothing(tmp_path, signum, group, code, line):
    def send(proc, helper):
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)

    rc, err, _ = _run(tmp_path, send)
    assert (rc, err) == (code, line + "\n")


def test_a_helper_killed_alone_is_an_error_not_a_wait_for_ever(tmp_path):
    rc, err, _ = _run(tmp_path, lambda proc, helper: os.kill(helper, signal.SIGKILL))
    assert rc == 2
    assert err == ("tbprobe: error: the row helper process stopped before it finished (signal 9: killed by a "
                   "signal, or by the system when memory ran out)\n")
