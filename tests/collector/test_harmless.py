"""The collector never hurts the training run."""
import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial

import pytest
import torch
from conftest import make_debugger, rank_dirs
from run_model import train
from train_hf import HF_PATH, have_transformers

from tbprobe.errors import TbprobeError

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("model, level, mode", [("gpt_dropout", "mix", "statistics"), ("conv", "L0", "statistics"),
                                                ("mlp", "L1", "md5"), ("llama", "L0", "statistics"),
                                                ("llama", "mix", "statistics"), ("hf-llama", "L0", "statistics"),
                                                ("hf-llama", "mix", "md5")])
def test_losses_and_weights_bitwise_identical(tmp_path, model, level, mode):
    """The Llamas at L0 and mix: a module whose input has other consumers and which uses it twice (an RMSNorm on
    the residual stream) must not change the order in which that input's gradient is summed, as the module views of an
    earlier design did, changing the last bits of the weights."""
    if model.startswith("hf-") and not have_transformers():
        pytest.skip(f"transformers is not installed under {HF_PATH} (bash scripts/hf_deps.sh)")
    torch.manual_seed(7)
    plain_model, plain_losses = train(None, model, steps=3)
    dbg = make_debugger(tmp_path, level=level, steps=3, summary_mode=mode)
    torch.manual_seed(7)
    probed_model, probed_losses = train(dbg, model, steps=3)
    dbg.close()
    assert len(rank_dirs(str(tmp_path / "dump"), 2)) == 1        # it did collect
    for a, b in zip(plain_losses, probed_losses):
        assert torch.equal(a, b)
    for (n, p), (_, q) in zip(plain_model.state_dict().items(), probed_model.state_dict().items()):
        assert torch.equal(p, q), n


def test_hook_exception_is_caught_counted_logged_once(tmp_path, monkeypatch, caplog):
    import tbprobe.collector.pytorch.stats as stats

    def broken(self, *args):
        raise RuntimeError("forced failure")

    # every statistic of every hook fails, on the host kernel's path and on torch's
    monkeypatch.setattr(stats.StatBuffer, "fill", broken)
    monkeypatch.setattr(stats.StatBuffer, "add", broken)
    torch.manual_seed(7)
    _, plain = train(None, "mlp", steps=2)
    dbg = make_debugger(tmp_path, level="mix", steps=2)
    torch.manual_seed(7)
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        _, probed = train(dbg, "mlp", steps=2)
    dbg.close()
    assert all(torch.equal(a, b) for a, b in zip(plain, probed))
    assert dbg.hook_errors > 5
    forced = [r for r in caplog.records if "forced failure" in r.getMessage()]
    assert len(forced) == len(dbg.guard.counts)          # one message per kind ...
    assert max(dbg.guard.counts.values()) > 1            # ... however often it happened


def _interrupt_once(monkeypatch, owner, attr):
    """owner.attr raises KeyboardInterrupt the first time it is called after `arm()`: a Ctrl-C landing there."""
    orig = getattr(owner, attr)
    armed = [False]

    def cut(*args, **kwargs):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt
        return orig(*args, **kwargs)

    monkeypatch.setattr(owner, attr, cut)
    return lambda: armed.__setitem__(0, True)


@pytest.mark.parametrize("where", ["backward hook", "operator pre-call"])
def test_a_ctrl_c_inside_the_collector_reaches_the_user_and_the_next_step_records(tmp_path, monkeypatch, where):
    """A KeyboardInterrupt raised in tbprobe's code is the user's Ctrl-C. From a hook the C++ engine calls, it
    once went to sys.unraisablehook and training went on as if the key was never pressed; in the operator capture's
    bookkeeping it left the collector busy, and every later step was recorded empty, without a word."""
    import tbprobe.collector.pytorch.api_mode as api_mode
    import tbprobe.collector.pytorch.backward_records as backward_records

    arm = (_interrupt_once(monkeypatch, backward_records.BackwardTracker, "_arrive") if where == "backward hook"
           else _interrupt_once(monkeypatch, api_mode, "api_name"))
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    dbg = make_debugger(tmp_path, level="mix", steps=3)
    interrupted = []
    for step in range(3):
        dbg.start(model=model)
        try:
            if step == 1:
                arm()
            loss = model(torch.randn(2, 4)).sum()
            loss.backward()
            for _ in range(1000):   # (an interrupt raised again is delivered at the next Python code at the latest)
                pass
        except KeyboardInterrupt:
            interrupted.append(step)
        dbg.stop()
        dbg.step()
    dbg.close()
    assert interrupted == [1] and not unraisable
    counts = [len(json.load(open(os.path.join(rank_dirs(str(tmp_path / "dump"), s)[0], "dump.json")))["data"])
              for s in range(3)]
    assert counts[0] == counts[2] > 10 and counts[1] < counts[0]
    assert dbg.session.busy == 0


def test_stop_takes_off_its_own_operator_mode_not_the_one_on_top(tmp_path):
    """stop() popped whatever torch-function mode was on top: a mode the user pushed after start() was lost (and
    its own exit then popped tbprobe's), and a second debugger started after the first lost its operator
    records when the first stopped."""
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    model = torch.nn.Linear(4, 1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = make_debugger(tmp_path / "a", level="L1", steps=1)
    b = make_debugger(tmp_path / "b", level="L1", steps=1)
    user = Count()
    a.start()
    b.start()
    user.__enter__()
    a.stop()
    model(torch.randn(2, 4)).sum().backward()
    before = Count.calls
    torch.ones(2) + 1
    assert Count.calls > before            # the user's mode is still on
    b.stop()
    user.__exit__(None, None, None)
    assert torch._C._len_torch_function_stack() == 0
    for dbg in (a, b):
        dbg.step()
        dbg.close()
        assert dbg.hook_errors == 0

    def names(d):
        return list(json.load(open(os.path.join(rank_dirs(str(d / "dump"))[0], "dump.json")))["data"])

    assert names(tmp_path / "a") == []
    assert "Functional.linear.0.forward" in names(tmp_path / "b") and "Functional.linear.0.backward" in \
        names(tmp_path / "b")


def test_unwritable_dump_path_is_clear_error_at_start(tmp_path):
    from tbprobe import PrecisionDebugger

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    dbg = PrecisionDebugger(dump_path=str(blocker / "dump"), level="L1", step=[0])
    with pytest.raises(TbprobeError, match="not writable"):
        dbg.start()
    dbg.close()


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_the_users_subclasses_and_function_modes_see_only_the_users_calls(tmp_path, level):
    """At L1 and mix tbprobe's own torch calls (statistics, property reads, the step's read-back) went through the
    user's tensor subclass's __torch_function__ (86 calls where the user's code made 2) and through a
    TorchFunctionMode the user entered before start() (123 -> 420); they run with torch functions disabled now."""
    import collections

    from torch.overrides import TorchFunctionMode

    from tbprobe import PrecisionDebugger

    seen = collections.Counter()

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen[getattr(func, "__name__", repr(func))] += 1
            return super().__torch_function__(func, types, args, kwargs or {})

    class Counting(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls[getattr(func, "__name__", repr(func))] += 1
            return func(*args, **(kwargs or {}))

    def run(dbg):
        seen.clear()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 1))
        mode = Counting()
        with mode:
            if dbg:
                dbg.start(model=model)
            x = torch.ones(3, 4).as_subclass(Logged)
            (model(x) * 2).sum().backward()
            if dbg:
                dbg.stop()
                dbg.step()
        return dict(seen), dict(mode.calls)

    plain = run(None)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level=level)
    collected = run(dbg)
    dbg.close()
    assert dbg.hook_errors == 0
    assert collected == plain
    assert plain[0] and plain[1]


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


def _installed(model):
    """What the collector could have installed into the process: module hooks, parameter hooks, a torch function
    mode, wrapped Tensor dunders, global optimizer hooks, threads."""
    from torch.optim import optimizer

    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    param_hooks = sum(len(p._backward_hooks or {}) for p in model.parameters())
    return (hooks, param_hooks, torch._C._len_torch_function_stack(), torch.Tensor.__add__, torch.Tensor.__mul__,
            len(optimizer._global_optimizer_pre_hooks), len(optimizer._global_optimizer_post_hooks),
            threading.active_count())


def test_a_debugger_not_started_installs_nothing(tmp_path):
    """The "created but not started costs nothing" claim, checked by what is installed rather than by a clock."""
    from run_model import build

    model = build("gpt_dropout")[0]
    before = _installed(model)
    dbg = make_debugger(tmp_path, level="mix", steps=2)
    assert _installed(model) == before
    dbg.start(model=model)
    during = _installed(model)
    assert during[0] > before[0] and during[2] == before[2] + 1 and during[3] is not before[3]
    dbg.stop()
    dbg.close()
    after = _installed(model)
    assert after[:7] == before[:7]          # every hook, the mode and the dunders are gone again


def test_operator_capture_is_removed_outside_the_collected_steps(tmp_path):
    """At L1/mix the dunder wrappers and the optimizer hooks stay between two collected steps (setting them on
    torch.Tensor at every start and stop invalidates the type's attribute cache) and record nothing there; they
    are gone once the next step is not collected, after a set_init_step jump, and at close."""
    from run_model import build, collected_step, config

    from tbprobe import PrecisionDebugger

    cfg = config(str(tmp_path / "dump"), "mix")
    cfg["step"] = [0, 1, 3, 5]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model, data, loss_fn = build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = _installed(model)
    dbg = PrecisionDebugger(config_path=str(path))

    one_step = partial(collected_step, dbg, model, opt, loss_fn)    # one_step(x, y): start ... stop
    a, b = torch.full((2,), 2.0), torch.full((2,), 3.0)
    one_step(*data[0])
    dbg.step()                                        # step 1 is collected too: the wrappers stay
    kept = _installed(model)
    assert kept[2] == before[2] and kept[3] is not before[3] and kept[5] == before[5] + 1
    assert torch.equal(a + b, torch.full((2,), 5.0))   # between steps: a wrapped dunder, not recorded
    opt.step()                                        # an optimizer step outside start/stop: not recorded
    dbg.set_init_step(2)                              # a jump to a step that is not collected
    dbg.start(model=model)
    assert _installed(model)[2:7] == before[2:7]
    dbg.stop()
    dbg.set_init_step(1)
    one_step(*data[1])
    dbg.step()                                        # step 2 is not collected: everything goes
    assert _installed(model)[2:7] == before[2:7]
    one_step(*data[2])                                # step 2: start() does nothing
    assert _installed(model)[2:7] == before[2:7]
    dbg.step()
    one_step(*data[3])                                # step 3: installed again
    assert _installed(model)[3] is not before[3]
    dbg.step()
    assert _installed(model)[2:7] == before[2:7]
    dbg.set_init_step(5)
    one_step(*data[0])
    dbg.close()
    assert _installed(model)[:7] == before[:7]

    def names(step):
        with open(os.path.join(rank_dirs(tmp_path / "dump", step)[0], "dump.json")) as f:
            return sorted(json.load(f)["data"])

    # a + b and the optimizer step ran between steps 0 and 1: step 1 holds exactly what step 0 holds
    assert names(1) == names(0) == names(3) and any(n.startswith("Functional.linear.") for n in names(1))
    assert sorted(os.listdir(tmp_path / "dump")) == ["step0", "step1", "step3", "step5"]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_no_step_keeps_its_autograd_graph_alive(tmp_path, level):
    """A step's autograd nodes (and the activations they save) are freed with the step: the collector's hooks on
    them must not form a loop back to them (the cyclic GC cannot see a node's hooks)."""
    import gc

    from run_model import build, collected_step

    def nodes() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o).__name__.endswith(("Backward0", "Backward1")))

    dbg = make_debugger(tmp_path, level=level, steps=40)
    model, data, loss_fn = build("gpt")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def steps(n):
        for i in range(n):
            collected_step(dbg, model, opt, loss_fn, *data[i % len(data)])
            dbg.step()

    steps(3)
    before = nodes()
    steps(10)
    after = nodes()
    dbg.close()
    assert after - before <= 2, f"{after - before} autograd nodes outlived their steps"


class _Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.fail = False

    def forward(self, x):
        y = self.lin(x)
        if self.fail:
            raise ValueError("the user's own error")
        return y


class _Mixed(torch.nn.Module):
    """A plain Linear, a TorchScript block (PyTorch refuses hooks on it) and a module that can raise."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
        self.b = _Raises()
        self.c = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.c(self.b(self.scripted(self.a(x))))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_torchscript_submodule_is_left_out_with_a_warning(tmp_path, level, caplog):
    torch.manual_seed(0)
    model, x = _Mixed(), torch.randn(2, 4)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        dbg.start(model=model)          # PyTorch's RuntimeError for hooks on a ScriptModule must not escape
        model(x).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    warned = [r.getMessage() for r in caplog.records if "TorchScript" in r.getMessage()]
    assert warned == ["tbprobe: Module.scripted is TorchScript (PyTorch allows no hooks on a ScriptModule): "
                      "not recorded at module level"]
    data = json.load(open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump.json")))["data"]
    modules = {n for n in data if n.startswith("Module.")}
    assert {"Module.a.Linear.forward.0", "Module.b._Raises.forward.0", "Module.b.lin.Linear.forward.0",
            "Module.c.Linear.forward.0", "Module.c.Linear.backward.0", "Module.a.Linear.backward.0"} <= modules
    assert not any(n.startswith("Module.scripted") for n in modules)
    assert dbg.hook_errors == 0


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_forward_that_raises_leaves_no_stale_parent(tmp_path):
    """The user's code catches an error raised inside a module's forward and goes on within the same step: the
    calls after it must not hang under the call that raised, and that call keeps a record of its inputs alone (as
    msprobe 26.2.0 does)."""
    torch.manual_seed(0)
    model, x = _Mixed(), torch.randn(2, 4)
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    model.b.fail = True
    with pytest.raises(ValueError, match="the user's own error"):
        model(x)
    model.b.fail = False
    model(x).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    construct = json.load(open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "construct.json")))
    data = json.load(open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump.json")))["data"]
    # the second forward's calls are top-level, as the first one's a.Linear was
    assert construct["Module.a.Linear.forward.0"] is None
    assert construct["Module.a.Linear.forward.1"] is None
    assert construct["Module.b._Raises.forward.1"] is None
    assert construct["Module.c.Linear.forward.0"] is None
    assert construct["Module.b.lin.Linear.forward.0"] == "Module.b._Raises.forward.0"
    assert construct["Module.b.lin.Linear.forward.1"] == "Module.b._Raises.forward.1"
    # the call that raised has its inputs recorded, and no output or parameters; the one that returned has all
    assert sorted(data["Module.b._Raises.forward.0"]) == ["input_args", "input_kwargs"]
    assert data["Module.b._Raises.forward.0"]["input_args"][0]["shape"] == [2, 4]
    assert "output" in data["Module.b._Raises.forward.1"]
    assert dbg.hook_errors == 0


class _HardPatterns(torch.nn.Module):
    """Operators that stress the capture: einsum, in-place on a view, index_put with accumulate, where, scatter_add_,
    masked SDPA, EmbeddingBag with offsets, complex views."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 6))
        self.emb = torch.nn.EmbeddingBag(10, 6, mode="mean")
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x, idx):
        h = torch.einsum("bi,ij->bj", x, self.w)
        h = h.clone()
        h[:, 0] += 1.0
        h = h.index_put((torch.tensor([0, 1]),), torch.ones(2, 6, dtype=h.dtype), accumulate=True)
        h = torch.where(h > 0, h, 0.1 * h)
        g = torch.zeros(3, 6, dtype=h.dtype).scatter_add_(0, torch.tensor([[0, 1, 2, 0, 1, 2]] * 2), h[:2])
        q = self.lin(h).view(1, 1, -1, 6)
        mask = torch.tril(torch.ones(q.shape[2], q.shape[2], dtype=torch.bool))
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).view(-1, 6)
        e = self.emb(idx, offsets=torch.tensor([0, 2]))
        c = torch.view_as_complex(torch.stack([a, a * 0.5], -1)).abs()
        return a.sum() + g.sum() + e.sum() + c.sum() + torch.linalg.norm(h, ord="fro")


def _train_hard(dbg, steps=2):
    """bf16 autocast with a GradScaler (unscale_ changes the gradients in place), gradient clipping and AdamW."""
    torch.manual_seed(0)
    model = _HardPatterns()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    losses = []
    for _ in range(steps):
        x, idx = torch.randn(4, 6), torch.tensor([1, 2, 3, 4])
        if dbg is not None:
            dbg.start(model=model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x, idx).float()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.detach())
    return losses + [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_hard_training_patterns_stay_bitwise_identical(tmp_path, level):
    plain = _train_hard(None)
    dbg = make_debugger(tmp_path, level=level, steps=2)
    probed = _train_hard(dbg)
    dbg.close()
    assert dbg.hook_errors == 0, dict(dbg.guard.counts)
    assert len(rank_dirs(str(tmp_path / "dump"), 1)) == 1        # it did collect
    assert all(torch.equal(a, b) for a, b in zip(plain, probed))


def test_an_operator_that_raises_keeps_its_inputs_and_recording_goes_on(tmp_path):
    """At L1 a call that raises (caught by the user's code) is recorded with its inputs, as msprobe 26.2.0 records
    it; the calls after it are recorded too (msprobe records nothing more in that step)."""
    dbg = make_debugger(tmp_path, level="L1", steps=1)
    x = torch.randn(2, 4)
    dbg.start()
    with pytest.raises(RuntimeError):
        torch.mm(x, torch.ones(3, 3))
    y = torch.relu(x)
    dbg.stop()
    dbg.step()
    dbg.close()
    data = json.load(open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump.json")))["data"]
    assert sorted(data["Torch.mm.0.forward"]) == ["input_args", "input_kwargs"]
    assert [a["shape"] for a in data["Torch.mm.0.forward"]["input_args"]] == [[2, 4], [3, 3]]
    assert data["Torch.relu.0.forward"]["output"][0]["Max"] == pytest.approx(y.max().item())
    assert dbg.hook_errors == 0


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


_LOAD_WITHOUT_TBPROBE = """
import sys
sys.modules["tbprobe"] = None          # (import tbprobe now raises ImportError)
import torch
model = torch.load(sys.argv[1], weights_only=False)
print(float(model(torch.ones(1, 4)).sum().detach()))
"""


def test_a_model_hooked_by_start_can_be_saved_whole_and_deep_copied(tmp_path):
    """torch.save(model) mid-run raised into the user's code (tbprobe's hooks were closures, which pickle refuses;
    msprobe's too); a deep copy (an EMA model) kept calling them, its calls recorded under the original's names.
    Copied or pickled, tbprobe's hooks are now ones that do nothing, made of the standard library: the checkpoint
    loads where tbprobe cannot be imported, and the copy's calls are not recorded."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    model(torch.ones(1, 4)).sum().backward()
    path = str(tmp_path / "model.pt")
    torch.save(model, path)
    ema = copy.deepcopy(model)
    ema(torch.ones(1, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump.json")) as f:
        names = list(json.load(f)["data"])
    assert len(names) == 8 and all(n.endswith((".0", "parameters_grad.0")) for n in names), names
    proc = subprocess.run([sys.executable, "-c", _LOAD_WITHOUT_TBPROBE, path], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip()) == float(model(torch.ones(1, 4)).sum().detach())


def test_a_live_graph_rebuild_slower_than_the_interval_is_not_run_at_every_step(tmp_path, monkeypatch):
    """The interval was timed from the rebuild's start: a graph whose rebuild outlasted it (30k nodes, 1.5 s) was
    rebuilt after every step, 2.8x the training time. Now the next rebuild waits LIVE_SHARE_WAIT times as long
    as the last took, so rebuilds take a bounded share of the run whatever the graph's size."""
    import tbprobe.collector.live_graph as live_graph
    from tbprobe import PrecisionDebugger

    calls = []
    real = live_graph.LiveGraph.update

    def slow_update(self, rank_dir, step):
        calls.append(step)
        time.sleep(0.2)                    # (a big graph's rebuild: waits 1.8 s after it)
        real(self, rank_dir, step)

    monkeypatch.setattr(live_graph.LiveGraph, "update", slow_update)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=list(range(10)),
                            live_graph_interval=0.0)
    for _ in range(10):
        with dbg.collect(model):
            model(torch.randn(1, 2)).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    # the first step, and the last at close; not each of the ten
    assert calls[0] == 0 and calls[-1] == 9 and len(calls) <= 3, calls


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


def _tensor_run(tmp_path, name):
    import glob

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    dump = tmp_path / name
    from tbprobe import PrecisionDebugger

    dbg = PrecisionDebugger(dump_path=str(dump), task="tensor", level="mix", step=[0, 1])
    for _ in range(2):
        with dbg.collect(model):
            model(torch.randn(8, 16)).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    files = {}
    for path in glob.glob(str(dump / "step*" / "*" / "dump_tensor_data" / "*.pt")):
        files[(path.split(os.sep)[-4], os.path.basename(path))] = torch.load(path)
    entries = [json.load(open(p))["data"] for p in sorted(glob.glob(str(dump / "step*" / "*" / "dump.json")))]
    return files, entries, dump


def test_task_tensor_writes_a_steps_tensors_out_once_it_holds_too_many(tmp_path, monkeypatch):
    """Each saved tensor's copy waited for the step's end: a big model's step held all its tensors twice (1.8 GB
    a step on a d=512 GPT, three steps' worth with async_dump). Past HOLD_BYTES the copies are written out at
    once to a staging folder and moved into place by the writer: the same files, the same records."""
    import tbprobe.collector.pytorch.session as session_mod

    held, spilled = [], []
    files, entries, _ = _tensor_run(tmp_path, "whole")
    monkeypatch.setattr(session_mod, "HOLD_BYTES", 1024)
    from tbprobe.collector.pytorch.debugger import PrecisionDebugger

    real_spill = PrecisionDebugger._spill_tensor

    def spill(self, step, fname, t):
        held.append(sum(f[1].numel() * f[1].element_size() for f in self.session.record.tensor_files
                        if not isinstance(f[1], session_mod.Spilled)))
        spilled.append(fname)
        return real_spill(self, step, fname, t)

    monkeypatch.setattr(PrecisionDebugger, "_spill_tensor", spill)
    files2, entries2, dump = _tensor_run(tmp_path, "spilled")
    assert len(spilled) > len(files) // 2
    # in memory at most the budget and the copy that went past it (the largest tensor here: a 32x16 weight)
    assert max(held) <= 1024 + 32 * 16 * 4, max(held)
    assert files2.keys() == files.keys() and all(torch.equal(files[k], files2[k]) for k in files)
    assert entries2 == entries
    assert not (tmp_path / "spilled_tb" / "staging" / str(os.getpid())).exists()
