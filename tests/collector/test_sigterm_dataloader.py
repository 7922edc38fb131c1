"""SIGTERM and a real torch DataLoader with two forked workers under the collector (tbprobe/collector/term_signal.py):
the workers exit normally when the loader is done, and go when their parent is ended by SIGTERM, alone or with its
whole process group (scancel, kill -TERM -pgid), and the step the parent was in is written either way."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

# argv: dump, flag, mode. The step is open while the next batch is fetched (its workers sleep): the flag says so.
_LOADER = """
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
from tbprobe import PrecisionDebugger

class Data(Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        if sys.argv[3] != "done" and i >= 16:
            time.sleep(0.5)
        return torch.full((4,), float(i)), torch.tensor(i % 2)

dbg = PrecisionDebugger(dump_path=sys.argv[1], level="mix", step=[0, 1, 2, 3, 4, 5])
# (many modules: writing the step takes long enough for the workers' deaths to come in the middle of it)
model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(60)], torch.nn.Linear(4, 2))
loader = DataLoader(Data(), batch_size=8, num_workers=2, multiprocessing_context="fork")
it = iter(loader)
print("workers", *[w.pid for w in it._workers], flush=True)
dbg.start(model=model)
for step, (x, y) in enumerate(it):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    if step == 1 and sys.argv[3] != "done":
        open(sys.argv[2], "w").close()
        next(it)     # (inside step 1, until the signal)
    dbg.stop(); dbg.step()
    dbg.start(model=model)
print("exitcodes", *[w.exitcode for w in it._workers], flush=True)
dbg.close()
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _entries(dump, step):
    (rank,) = os.listdir(os.path.join(dump, f"step{step}"))
    with open(os.path.join(dump, f"step{step}", rank, "dump.json")) as f:
        return list(json.load(f)["data"])


def test_the_workers_exit_normally_when_the_loader_is_done(tmp_path):
    dump = str(tmp_path / "dump")
    proc = subprocess.run([sys.executable, "-c", _LOADER, dump, "", "done"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "exitcodes 0 0", proc.stdout
    assert "Traceback" not in proc.stderr and "tbprobe" not in proc.stderr, proc.stderr[-2000:]
    assert sorted(os.listdir(dump)) == [f"step{s}" for s in range(6)]
    assert "Module.60.Linear.backward.0" in _entries(dump, 5)


@pytest.mark.parametrize("whom", ["parent", "group"])
def test_sigterm_writes_the_parents_open_step_and_its_workers_go(tmp_path, whom):
    """`group`: the workers die of the same SIGTERM, and the DataLoader's SIGCHLD handler raised its 'worker ...
    is killed by signal' into the write of the open step, which was lost."""
    dump, flag = str(tmp_path / "dump"), str(tmp_path / "flag")
    proc = subprocess.Popen([sys.executable, "-c", _LOADER, dump, flag, whom], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        workers = [int(p) for p in proc.stdout.readline().split()[1:]]
        assert len(workers) == 2, proc.communicate(timeout=60)
        deadline = time.time() + 120
        while not os.path.exists(flag) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(flag), proc.communicate(timeout=60)
        if whom == "group":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGTERM, err[-2000:]
    assert "SIGTERM came inside step 1" in err, err[-2000:]
    assert "Traceback" not in err and "error" not in err, err[-2000:]
    assert "Module.60.Linear.backward.0" in _entries(dump, 1)
    assert not [f for _, _, files in os.walk(dump) for f in files if ".tmp-" in f]
    # an orphaned worker sees its parent gone within the loader's status interval (5 s) and exits
    deadline = time.time() + 60
    while any(_alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers)
