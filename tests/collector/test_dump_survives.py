"""The collector never hurts the training run, and the dump survives what befalls it: an unwritable dump path or
side folder is a clear error at start(), a full disk (a real one on a small tmpfs too) switches collection or the
live graph off with one message and gives the live graph's room back, the dump and its side folder deleted
mid-run come back, a SIGKILL mid-step leaves the completed steps readable, and the step a process ends in is
written at exit."""
import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import launch_ranks, make_debugger, rank_dirs
from run_model import train

from tbprobe.errors import TbprobeError

HERE = os.path.dirname(os.path.abspath(__file__))


def test_unwritable_dump_path_is_clear_error_at_start(tmp_path, monkeypatch):
    from tbprobe import PrecisionDebugger

    # (a file above dump_path is refused when the debugger is made, test_config.py; here the folder is made but
    # refuses the write probe, as a read-only one does for a user who is not root)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    real_open = open

    def refusing_open(path, *args, **kwargs):
        if ".tbprobe-write-test-" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr("builtins.open", refusing_open)
    with pytest.raises(TbprobeError, match="dump_path .*dump: not writable \\(Permission denied\\)"):
        dbg.start()
    monkeypatch.undo()
    dbg.close()


def test_a_side_folder_that_cannot_be_made_is_a_clear_error_at_start(tmp_path):
    """dump_path writable, <dump_path>_tb not (a file there; a read-only parent): start() took it, and every step
    then failed there again, counted as hook errors."""
    from tbprobe import PrecisionDebugger

    (tmp_path / "dump_tb").write_text("x")
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    with pytest.raises(TbprobeError, match="beside dump_path .*dump_tb: not writable"):
        dbg.start(model=torch.nn.Linear(2, 2))
    dbg.close()


def test_disk_full_stops_collection_training_continues(tmp_path, monkeypatch, caplog):
    import tbprobe.collector.writer as writer

    real = writer.write_files
    done = {"first_step": False}

    def full_after_first_step(dirs, files):
        if done["first_step"]:   # the first step's files succeed, then the disk is "full"
            raise OSError(errno.ENOSPC, "No space left on device")
        written = real(dirs, files)
        done["first_step"] = any(os.path.basename(f[0]) == "dump.json" for f in files)
        return written

    monkeypatch.setattr(writer, "write_files", full_after_first_step)
    dbg = make_debugger(tmp_path, level="L1", steps=5)
    with caplog.at_level(logging.ERROR, logger="tbprobe.collector"):
        _, losses = train(dbg, "mlp", steps=5)
    dbg.close()
    assert len(losses) == 5
    assert rank_dirs(str(tmp_path / "dump"), 0)
    assert not list((tmp_path / "dump").glob("step1/*/dump.json"))
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1   # said once
    assert "disk full" in caplog.records[0].getMessage()
    assert dbg._finished                                   # switched itself off


@contextlib.contextmanager
def _small_disk(tmp_path):
    """A 2 MB tmpfs at tmp_path/small for the test's dump (skipped where it cannot be mounted: needs root)."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield small
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)   # (lazy: a file still open there)


def test_a_real_disk_full_with_the_tensor_task_stops_collection_with_one_message(tmp_path, caplog):
    """A tmpfs of 2 MB fills while task tensor writes its files. torch.save reported the full disk as a
    RuntimeError of its internals ("unexpected pos"), which the writer took for one bad tensor: the warning came
    first, every later tensor file of the step was tried (43 empty files left, 44 hook errors), and only
    dump.json's OSError stopped collection. Now: one message, no hook error, and no half-written step."""
    with _small_disk(tmp_path) as small:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        dbg = make_debugger(small, level="mix", steps=30, task="tensor")
        losses = []
        with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
            for _ in range(30):
                with dbg.collect(model):
                    opt.zero_grad()
                    loss = model(torch.randn(16, 64)).pow(2).mean()
                    loss.backward()
                    opt.step()
                losses.append(loss.item())
        dbg.close()
        assert len(losses) == 30 and dbg._finished and dbg.hook_errors == 0
        messages = [r.getMessage() for r in caplog.records]
        # (and, where the live graph was made before the disk filled, the one saying it gave its room back)
        assert len(messages) <= 2 and "disk full" in messages[0], messages
        assert all("the live graph is switched off" in m for m in messages[1:]), messages
        steps = sorted((small / "dump").glob("step*"))
        assert steps, "the first step fits"
        for step in steps:             # each step there is whole: its dump.json, and every file it names
            for rank in step.iterdir():
                data = json.loads((rank / "dump.json").read_text())["data"]
                names = {i["data_name"] for rec in data.values() for i in _items(rec) if "data_name" in i}
                assert names and all((rank / "dump_tensor_data" / n).stat().st_size > 0 for n in names)


def _items(value):
    if isinstance(value, dict):
        if "type" in value:
            yield value
        else:
            for v in value.values():
                yield from _items(v)
    elif isinstance(value, list):
        for v in value:
            yield from _items(v)


def test_the_dump_and_its_side_folder_deleted_mid_run_come_back(tmp_path, monkeypatch):
    """`rm -rf` of the dump and of <dump>_tb between steps: the next steps are written again, and so are the health
    events and the live graph (they were written to the deleted files, and nothing said so)."""
    import shutil

    import tbprobe.collector.events as events
    from tbprobe import PrecisionDebugger

    monkeypatch.setattr(events, "FLUSH_SECS", 0.0)   # (the event file is looked for when flushed)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0, 1, 2], live_graph_interval=0.0)
    for step in range(3):
        if step == 2:
            shutil.rmtree(tmp_path / "dump")
            shutil.rmtree(tmp_path / "dump_tb")
        dbg.start(model=model)
        model(torch.randn(1, 2)).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    assert sorted(os.listdir(tmp_path / "dump")) == ["step2"]
    side = tmp_path / "dump_tb"
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(side / "events") for f in fs]
    steps = [e.step for e in EventFileLoader(path).Load() if e.HasField("summary")]
    assert steps == [2]
    (db,) = [f for f in os.listdir(side) if f.endswith(".vis.db")]
    import sqlite3

    with sqlite3.connect(side / db) as conn:
        assert conn.execute("select count(*) from tb_nodes").fetchone()[0] > 0


KILL_SCRIPT = r'''
import json, os, sys, time
sys.path.insert(0, {here!r})
import torch
from run_model import build, config
from tbprobe import PrecisionDebugger
cfg = config({dump!r}, "mix", steps=10)
json.dump(cfg, open({cfgp!r}, "w"))
dbg = PrecisionDebugger(config_path={cfgp!r})
model, data, loss_fn = build("mlp")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    dbg.start(model=model)
    loss = loss_fn(model(data[0][0]), data[0][1])
    if step == 3:
        dbg._writer.flush()
        open({flag!r}, "w").write("mid-step")
        time.sleep(60)
    loss.backward(); opt.step(); opt.zero_grad()
    dbg.stop(); dbg.step()
'''


def test_sigkill_mid_step_leaves_completed_steps_readable(tmp_path):
    dump, flag = str(tmp_path / "dump"), str(tmp_path / "flag")
    script = KILL_SCRIPT.format(here=HERE, dump=dump, cfgp=str(tmp_path / "c.json"), flag=flag)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        while not os.path.exists(flag) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert os.path.exists(flag), "the training subprocess never reached step 3"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    for step in range(3):
        (rank,) = rank_dirs(dump, step)
        for name in ("dump", "construct", "stack"):
            with open(os.path.join(rank, f"{name}.json")) as f:
                json.load(f)
    assert not os.path.exists(os.path.join(dump, "step3"))
    leftovers = [f for _, _, files in os.walk(dump) for f in files if ".tmp-" in f]
    assert leftovers == []


def test_a_disk_full_under_the_live_graph_switches_it_off_and_frees_its_room(tmp_path, monkeypatch, caplog):
    """A full disk failed the live graph's transaction first; its journal kept the room until close, so the next
    step's dump found the disk full and collection stopped: completed steps lost for an auxiliary file. Now the
    live graph goes (its files removed) with one warning, and the dump carries on."""
    import sqlite3

    import tbprobe.collector.live_graph as live_graph
    from tbprobe import PrecisionDebugger

    real = live_graph.LiveGraph.update

    def update(self, rank_dir, step):
        if step >= 1:
            raise sqlite3.OperationalError("database or disk is full")
        real(self, rank_dir, step)

    monkeypatch.setattr(live_graph.LiveGraph, "update", update)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0, 1, 2], live_graph_interval=0.0)
    for step in range(3):
        with dbg.collect(model):
            model(torch.randn(1, 2)).sum().backward()
        if step == 0:
            assert [f for f in os.listdir(tmp_path / "dump_tb") if f.endswith(".vis.db")]
    dbg.close()
    assert dbg.hook_errors == 0
    assert caplog.text.count("the live graph is switched off") == 1
    assert not [f for f in os.listdir(tmp_path / "dump_tb") if ".vis.db" in f]
    assert sorted(os.listdir(tmp_path / "dump")) == ["step0", "step1", "step2"]


def test_a_real_disk_full_while_the_live_graph_is_made_leaves_no_database_behind(tmp_path, caplog):
    """The step's tensor files fill a 2 MB tmpfs, then the live graph's database is made: its WAL could not be
    copied in as it closed (without a word), the rename put a malformed database under the real name, its journals
    stayed, and the error (SQLite's "disk I/O error") was counted as a hook error, not seen as a full disk. Now the
    database is made with a rollback journal (the COMMIT fails instead), a failure where no room is left is a full
    disk, and switching the live graph off deletes what it was making."""
    from tbprobe import PrecisionDebugger

    with _small_disk(tmp_path) as small:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                    torch.nn.LayerNorm(64), torch.nn.Linear(64, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        dbg = PrecisionDebugger(dump_path=str(small / "dump"), task="tensor", level="L1", live_graph_interval=0.0)
        losses = []
        with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
            for _ in range(20):
                with dbg.collect(model):
                    loss = model(torch.randn(32, 64)).pow(2).mean()
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                losses.append(loss.item())
            dbg.close()
        assert len(losses) == 20 and dbg.hook_errors == 0, dict(dbg.guard.counts)
        assert "the live graph is switched off" in caplog.text
        left = [f for f in os.listdir(small / "dump_tb") if ".vis.db" in f]
        assert left == [], left


def test_a_full_disk_met_by_the_dump_also_frees_the_live_graphs_room(tmp_path, monkeypatch, caplog):
    """The dump's write failed on the full disk first: collection stopped, but the live graph and its journals
    kept their room (on a 2 MB tmpfs, 450 KB) after the process ended; only a failure of its own switched it off."""
    import errno

    import tbprobe.collector.writer as writer
    from tbprobe import PrecisionDebugger

    real = writer.StepWriter._write_step

    def write_step(self, record, out, step_dir):
        if record.step >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, record, out, step_dir)

    monkeypatch.setattr(writer.StepWriter, "_write_step", write_step)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", live_graph_interval=0.0)
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        for _ in range(4):
            with dbg.collect(model):
                model(torch.randn(1, 2)).sum().backward()
        dbg.close()
    assert "disk full" in caplog.text and "the live graph is switched off" in caplog.text
    assert not [f for f in os.listdir(tmp_path / "dump_tb") if ".vis.db" in f]
    assert sorted(os.listdir(tmp_path / "dump")) == ["step0", "step1"]


_UNFINISHED = """
import sys
import torch
from tbprobe import PrecisionDebugger
how = sys.argv[2]
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="L0", step=[0, 1, 2])
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
for step in range(3):
    dbg.start(model=model)
    h = model[0](torch.randn(2, 4))
    if step == 2 and how == "raise":
        raise RuntimeError("the user's own error")
    if step == 2 and how == "exit":
        sys.exit(3)
    model[2](model[1](h)).sum().backward()
    dbg.stop()
    if step < 2 or how != "no step":
        dbg.step()
"""


@pytest.mark.parametrize("how, rc", [("raise", 1), ("exit", 3), ("no step", 0)])
def test_the_step_a_process_ends_in_is_written_at_exit(tmp_path, how, rc):
    """A script that ends inside a step (an uncaught error, sys.exit(), no step() or close() after the last
    stop()) lost that step's records, the ones a user debugging the crash needs; msprobe writes them. Now they
    are written at exit, with a warning, and the process's own exit status and error stay as they were."""
    dump = str(tmp_path / "dump")
    proc = subprocess.run([sys.executable, "-c", _UNFINISHED, dump, how], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == rc, proc.stderr[-2000:]
    assert ("the user's own error" in proc.stderr) == (how == "raise")
    assert "ending inside step 2" in proc.stderr and "Error in atexit" not in proc.stderr
    (rank,) = os.listdir(os.path.join(dump, "step2"))
    with open(os.path.join(dump, "step2", rank, "dump.json")) as f:
        names = list(json.load(f)["data"])
    assert names[0] == "Module.0.Linear.forward.0"
    assert ("Module.2.Linear.backward.0" in names) == (how == "no step")


_PEER_CRASHES = """
import datetime, os, sys
import torch
import torch.distributed as dist
from tbprobe import PrecisionDebugger
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=120))
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="mix", step=[0])
dbg.start(model=torch.nn.Linear(3, 3))
t = torch.exp(torch.ones(3))
if rank == 1:
    raise RuntimeError("rank 1 crashed on purpose")
dist.send(t, dst=1)            # blocked until rank 1's end closes the connection: gloo raises then
"""


def test_a_rank_blocked_in_a_send_when_its_peer_crashes_keeps_the_send_and_says_which_rank(tmp_path):
    """Rank 1 raises; rank 0, waiting in send(dst=1), gets gloo's "Connection closed by peer" and ends inside its
    step. Its step ended at the call before the send: nothing showed where it was stuck (msprobe keeps the send's
    inputs). And each rank's exit warning was the same line, which read as one message printed twice."""
    dump = str(tmp_path / "dump")
    procs = launch_ranks(_PEER_CRASHES, [dump], tmp_path)
    errs = []
    try:
        for p in procs:
            errs.append(p.communicate(timeout=240)[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [1, 1], errs
    assert "Connection closed by peer" in errs[0] or "Connection reset" in errs[0], errs[0][-2000:]
    for rank, err in enumerate(errs):
        assert err.count("ending inside step 0") == 1, err[-2000:]
        assert f"tbprobe: rank {rank}: the process is ending inside step 0" in err
    with open(os.path.join(dump, "step0", "rank0", "dump.json")) as f:
        data = json.load(f)["data"]
    assert list(data)[-2:] == ["Torch.exp.0.forward", "Distributed.send.0.forward"]
    send = data["Distributed.send.0.forward"]
    assert "output" not in send
    assert send["input_args"][0]["Max"] == pytest.approx(2.718281828) and send["input_kwargs"]["dst"]["value"] == 1
