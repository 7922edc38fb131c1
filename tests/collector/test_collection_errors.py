"""The collector never hurts the training run when something fails: an error in its hooks is caught, counted and
logged once, a Ctrl-C inside it reaches the user and the next step records, a TorchScript submodule (no hooks
allowed) is left out with a warning, and the user's own errors raised in a module's forward or an operator leave
recording going on, with the inputs of the call that raised."""
import json
import logging
import os
import sys

import pytest
import torch
from conftest import make_debugger, rank_dirs
from run_model import train


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


class _Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.fail = False

    def forward(self, x):
        y = self.lin(x)
        if self.fail:
            raise self.fail if isinstance(self.fail, BaseException) else ValueError("the user's own error")
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


def _fail_then_go_on(tmp_path, fail, raised, match=None, **cfg):
    """One collected step of _Mixed whose first forward raises inside `b` (`fail`: True for the user's ValueError,
    or the exception to raise), caught here as the user's code would, then a forward and backward that work: the
    closed debugger and the step's rank folder."""
    torch.manual_seed(0)
    model, x = _Mixed(), torch.randn(2, 4)
    dbg = make_debugger(tmp_path, steps=1, **cfg)
    dbg.start(model=model)
    model.b.fail = fail
    with pytest.raises(raised, match=match):
        model(x)
    model.b.fail = False
    model(x).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    return dbg, rank_dirs(str(tmp_path / "dump"))[0]


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_forward_that_raises_leaves_no_stale_parent(tmp_path):
    """The user's code catches an error raised inside a module's forward and goes on within the same step: the
    calls after it must not hang under the call that raised, and that call keeps a record of its inputs alone (as
    msprobe 26.2.0 does)."""
    dbg, rank = _fail_then_go_on(tmp_path, True, ValueError, "the user's own error", level="L0")
    construct = json.load(open(os.path.join(rank, "construct.json")))
    data = json.load(open(os.path.join(rank, "dump.json")))["data"]
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


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_forward_cut_short_by_a_ctrl_c_leaves_no_parent_that_is_not_there(tmp_path, level):
    """A KeyboardInterrupt raised inside a module's forward, caught by the user within the step: torch runs no
    forward hook then (always_call covers an Exception alone), so the call never ended. The calls after it hung
    under a node construct.json did not have, forward and backward, and its input's tensor file had no record. It
    gets the record of a call that raised now, inputs alone, as msprobe keeps it (the calls after it stay under it,
    as in msprobe: nothing tells a call cut short from one still running until the step ends)."""
    dbg, rank = _fail_then_go_on(tmp_path, KeyboardInterrupt(), KeyboardInterrupt, level=level, task="tensor")
    construct = json.load(open(os.path.join(rank, "construct.json")))
    data = json.load(open(os.path.join(rank, "dump.json")))["data"]
    named = {p for p in construct.values() if p is not None and p not in ("optimizer", "clip_grad")}
    assert named <= set(construct), named - set(construct)
    assert sorted(data["Module.b._Raises.forward.0"]) == ["input_args", "input_kwargs"]
    saved = {n for n in os.listdir(os.path.join(rank, "dump_tensor_data"))}
    linked = {v["data_name"] for rec in data.values() for side in rec.values() if isinstance(side, list)
              for v in side if isinstance(v, dict) and "data_name" in v}
    linked |= {v["data_name"] for rec in data.values() for side in rec.values() if isinstance(side, dict)
               for v in side.values() if isinstance(v, dict) and "data_name" in v}
    assert saved == linked, saved ^ linked
    assert dbg.hook_errors == 0


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
