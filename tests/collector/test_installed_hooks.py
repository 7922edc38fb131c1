"""What the collector installs into the process (module and parameter hooks, its torch function mode, wrapped
Tensor dunders, global optimizer hooks) and takes off again: nothing before start(), nothing outside the
collected steps nor after close(), its own mode alone at stop(); and a hooked model can still be pickled whole
and deep-copied."""
import json
import os
import subprocess
import sys
import threading
from functools import partial

import torch
from conftest import make_debugger, rank_dirs


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


_LOAD_WITHOUT_TBPROBE = """
import sys
sys.modules["tbprobe"] = None          # (import tbprobe now raises ImportError)
import torch
model = torch.load(sys.argv[1], weights_only=False)
seen = []
for sub in model:   # the user's own hooks on the loaded model: new ids, which took the copied hooks' ones
    sub.register_forward_hook(lambda mod, args, out: seen.append(type(mod).__name__))
print(float(model(torch.ones(1, 4)).sum().detach()))
assert seen == ["Linear", "ReLU", "Linear"], seen
"""

# the checkpoint resumed under tbprobe in a fresh process (hook ids from 0 again)
_RESUME_WITH_TBPROBE = """
import sys
import torch
from tbprobe import PrecisionDebugger
model = torch.load(sys.argv[1], weights_only=False)
model[0].register_forward_hook(lambda mod, args, out: None)   # (a user's hook: tbprobe ends the call before it)
dbg = PrecisionDebugger(dump_path=sys.argv[2], task="statistics", level="L0", step=[0])
dbg.start(model=model)
model(torch.ones(1, 4)).sum().backward()
dbg.stop()
dbg.step()
print(dbg.hook_errors)
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
    # the ids a fresh process gives its first hooks, as the checkpoint of a script's first model has them (here
    # they would be past every id the loading process gives: no clash to see)
    from torch.utils.hooks import RemovableHandle

    given, RemovableHandle.next_id = RemovableHandle.next_id, 0
    try:
        dbg.start(model=model)
    finally:
        RemovableHandle.next_id = max(given, RemovableHandle.next_id)
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
    # resumed and hooked again in a fresh process: a new hook took a copied hook's id and was called with that
    # one's kwargs signature (a TypeError in the user's first forward)
    proc = subprocess.run([sys.executable, "-c", _RESUME_WITH_TBPROBE, path, str(tmp_path / "resumed")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr[-2000:]
    with open(os.path.join(rank_dirs(str(tmp_path / "resumed"))[0], "dump.json")) as f:
        assert "Module.0.Linear.forward.0" in json.load(f)["data"]
