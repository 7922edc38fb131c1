"""SIGTERM, as launchers end a job's other ranks when one fails: the open step is written, then the process ends as
SIGTERM ends it; a process blocked in C, a forked child and a user's own handler are never held up or overridden
(tbprobe/collector/term_signal.py)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import free_port, launch_ranks

_SCRIPTS = {
    # step 0 whole; step 1 stops after its first module, in Python (a host-side loop), until the signal comes
    "mid_step": """
import sys, time
import torch
from tbprobe import PrecisionDebugger
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="L0", step=[0, 1, 2])
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
for step in range(3):
    dbg.start(model=model)
    h = model[0](torch.randn(2, 4))
    if step == 1:
        open(sys.argv[2], "w").close()
        while True:
            time.sleep(0.05)
    model[2](model[1](h)).sum().backward()
    dbg.stop(); dbg.step()
""",
    # the user's handler, installed before start(): it stays, and runs
    "own_handler": """
import signal, sys, time
import torch
from tbprobe import PrecisionDebugger
def mine(signum, frame):
    print("the user's handler ran", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, mine)
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="L0", step=[0])
model = torch.nn.Linear(4, 4)
dbg.start(model=model)
model(torch.randn(2, 4))
open(sys.argv[2], "w").close()
while True:
    time.sleep(0.05)
""",
    # a child forked mid-step (as a DataLoader worker is) gets SIGTERM's default action; the parent goes on
    "fork": """
import os, signal, sys, time
import torch
from tbprobe import PrecisionDebugger
from tbprobe.collector import term_signal
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="L0", step=[0])
model = torch.nn.Sequential(torch.nn.Linear(4, 4))
dbg.start(model=model)
model(torch.randn(2, 4))
pid = os.fork()
if pid == 0:
    time.sleep(120)
    os._exit(0)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print("child", os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit", flush=True)
time.sleep(term_signal.WATCHDOG_S + 1)   # (a signal of the child's reaching the parent's watchdog would end it)
dbg.stop(); dbg.step(); dbg.close()
print("parent done", flush=True)
""",
}


def _run_until_flag(tmp_path, name, signum=signal.SIGTERM):
    dump, flag = str(tmp_path / "dump"), str(tmp_path / "flag")
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPTS[name], dump, flag], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not os.path.exists(flag) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(flag), proc.communicate(timeout=30)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, dump


def _names(dump, step):
    (rank,) = os.listdir(os.path.join(dump, f"step{step}"))
    with open(os.path.join(dump, f"step{step}", rank, "dump.json")) as f:
        return list(json.load(f)["data"])


def test_sigterm_mid_step_writes_the_open_step_then_ends_the_process_as_sigterm_does(tmp_path):
    """SIGTERM's default action skips atexit: the step a rank was in when its launcher ended it (the step the user
    debugs) was lost."""
    rc, _, err, dump = _run_until_flag(tmp_path, "mid_step")
    assert rc == -signal.SIGTERM, err[-2000:]
    assert "SIGTERM came inside step 1" in err and "Traceback" not in err, err[-2000:]
    assert _names(dump, 1) == ["Module.0.Linear.forward.0"]
    assert "Module.2.Linear.backward.0" in _names(dump, 0)
    assert not [f for _, _, files in os.walk(dump) for f in files if ".tmp-" in f]


def test_a_users_own_sigterm_handler_is_kept_and_runs(tmp_path):
    rc, out, err, dump = _run_until_flag(tmp_path, "own_handler")
    assert rc == 7 and "the user's handler ran" in out, err[-2000:]
    assert "SIGTERM came" not in err


def test_a_forked_child_gets_sigterms_default_action_and_the_parent_goes_on(tmp_path):
    dump = str(tmp_path / "dump")
    proc = subprocess.run([sys.executable, "-c", _SCRIPTS["fork"], dump, ""], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"child {int(signal.SIGTERM)}" in proc.stdout and "parent done" in proc.stdout
    assert "SIGTERM came" not in proc.stderr
    assert _names(dump, 0) == ["Module.0.Linear.forward.0"]


def test_the_handler_is_installed_while_collecting_and_removed_at_close(tmp_path):
    import torch

    from tbprobe import PrecisionDebugger
    from tbprobe.collector import term_signal

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner handles SIGTERM itself")
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    model = torch.nn.Linear(2, 2)
    dbg.start(model=model)
    assert term_signal.installed() == os.getpid()
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    model(torch.randn(1, 2))
    dbg.stop()
    watchdogs = [t for t in threading.enumerate() if t.name == "tbprobe-sigterm"]
    assert watchdogs
    dbg.close()
    assert term_signal.installed() is None
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1
    for t in watchdogs:   # (ends with its pipe: none is left behind per start() and close())
        t.join(timeout=30)
        assert not t.is_alive()


_BLOCKED = """
import datetime, os, sys, time
import torch
import torch.distributed as dist
from tbprobe import PrecisionDebugger
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=200))
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="mix", step=[0])
dbg.start(model=torch.nn.Linear(3, 3))
t = torch.exp(torch.ones(3))
if rank == 1:
    time.sleep(150)              # alive, and never sends
    sys.exit(0)
open(sys.argv[2], "w").close()
dist.recv(t, src=1)              # blocked in gloo's C++ wait, where Python's signal handlers never run
"""


def test_a_rank_blocked_in_c_ends_at_sigterm_and_keeps_its_open_step(tmp_path):
    """A handler runs between bytecodes: a main thread waiting in a collective for a peer that never sends would
    never run it, and a SIGTERM that no longer ended the process would hang the launcher. The watchdog writes the
    open step from its own thread (the step a launcher's SIGTERM cuts short is most often one where the surviving
    ranks wait in a collective for the failed one: it was lost on each of them), then ends the process."""
    dump, flag = str(tmp_path / "dump"), str(tmp_path / "flag")
    procs = launch_ranks(_BLOCKED, [dump, flag], tmp_path, ranks=(1, 0))
    peer, blocked = procs
    try:
        deadline = time.time() + 120
        while not os.path.exists(flag) and blocked.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(flag), blocked.communicate(timeout=30)
        time.sleep(1)    # (into the recv)
        blocked.send_signal(signal.SIGTERM)
        err = blocked.communicate(timeout=120)[1]   # (before the watchdog: until the peer's 150 s were over)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert blocked.returncode == -signal.SIGTERM, err[-2000:]
    assert "blocked outside Python" in err and "written from another thread" in err, err[-2000:]
    assert "Traceback" not in err and "failed" not in err, err[-2000:]
    with open(os.path.join(dump, "step0", "rank0", "dump.json")) as f:
        data = json.load(f)["data"]
    assert "Torch.exp.0.forward" in data, list(data)
    # the collective it was stuck in, with its inputs (no output: it never returned)
    recv = data.get("Distributed.recv.0.forward")
    assert recv is not None and "output" not in recv, list(data)
    assert recv["input_kwargs"]["src"]["value"] == 1, recv


def _spawned_rank(rank, dump, port):
    import torch
    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg = PrecisionDebugger(dump_path=dump, level="mix", step=[0])
    model = torch.nn.Linear(3, 3)
    dbg.start(model=model)
    y = model(torch.ones(2, 3))
    dist.all_reduce(y)
    if rank == 1:
        raise RuntimeError("rank 1 diverged and crashed on purpose")
    while True:          # rank 0 goes on with host-side work until mp.spawn ends it
        time.sleep(0.05)


def test_the_ranks_mp_spawn_ends_when_one_fails_keep_the_failing_step(tmp_path):
    """The job's case: rank 1 raises in step 0, mp.spawn ends rank 0 with SIGTERM. Rank 0's step 0 (its forward
    and all_reduce, the records to put beside rank 1's) was lost."""
    import torch.multiprocessing as mp

    dump = str(tmp_path / "dump")
    port = free_port()
    with pytest.raises(mp.ProcessRaisedException, match="crashed on purpose"):
        mp.spawn(_spawned_rank, args=(dump, port), nprocs=2, join=True)
    for rank in (0, 1):
        with open(os.path.join(dump, "step0", f"rank{rank}", "dump.json")) as f:
            names = list(json.load(f)["data"])
        assert "Distributed.all_reduce.0.forward" in names, names


_HANDLER_AFTER = """
import os, signal, sys, time
from tbprobe.collector import term_signal
term_signal.WATCHDOG_S = 0.2
class Owner: pass
owner = Owner()
term_signal.on_terminate(owner, lambda: None)
got = []
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))   # the user's, after tbprobe's: a graceful shutdown
os.kill(os.getpid(), signal.SIGTERM)
for _ in range(40):   # the watchdog's wait (0.2 s) passes several times over
    time.sleep(0.05)
print("alive", got == [signal.SIGTERM], flush=True)
"""


def test_a_handler_the_user_installs_after_start_is_not_overridden_by_the_watchdog():
    proc = subprocess.run([sys.executable, "-c", _HANDLER_AFTER], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.strip() == "alive True"
