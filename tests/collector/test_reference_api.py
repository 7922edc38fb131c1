"""The reference's calls beyond start/stop/step (msprobe users switch by changing one import): custom APIs,
module_dump, start's token_range, rank_id and scheduled_tokens, save's save_backward (test_debug_save.py)
and seed_all's is_enhanced. The expected names are the reference's; the peer test below checks them against
msprobe's own dumps of the same calls."""
import glob
import json
import logging
import os
import subprocess
import sys
import types

import pytest
import torch
from conftest import PEER_PYTHON, make_debugger, need_peers, rank_dirs
from reference_api_cases import fused_op, run

from tbprobe import PrecisionDebugger, module_dump, module_dump_end, seed_all
from tbprobe.errors import TbprobeError

HERE = os.path.dirname(os.path.abspath(__file__))

EXPECTED = {
    "custom": ["mylib.fused_op.0.forward", "mylib.fused_op.1.forward", "Tensor.sum.0.forward", "Tensor.sum.0.backward",
               "mylib.fused_op.1.backward", "mylib.fused_op.0.backward"],
    # at L0 the custom function is recorded beside the modules (the sum is not)
    "custom_l0": ["Module.0.Linear.forward.0", "mylib.fused_op.0.forward", "Module.1.Linear.forward.0",
                  "mylib.fused_op.1.forward", "mylib.fused_op.1.backward", "Module.1.Linear.parameters_grad.0",
                  "Module.1.Linear.backward.0", "mylib.fused_op.0.backward", "Module.0.Linear.backward.0",
                  "Module.0.Linear.parameters_grad.0"],
    "module_dump": ["Functional.linear.0.forward", "Module.block.Sequential.forward.0", "Functional.linear.1.forward",
                    "Tensor.sum.0.forward", "Tensor.sum.0.backward", "Functional.linear.1.backward",
                    "Module.block.Sequential.backward.0", "Functional.linear.0.backward"],
    # forwards 1 and 2 of five, each with what follows it up to the next forward
    "tokens": ["Functional.linear.0.forward", "Module.0.Linear.forward.0", "Torch.tanh.0.forward",
               "Module.1.Tanh.forward.0", "Tensor.__add__.0.forward", "Functional.linear.1.forward",
               "Module.0.Linear.forward.1", "Torch.tanh.1.forward", "Module.1.Tanh.forward.1",
               "Tensor.__add__.1.forward"],
    "rank": ["Tensor.sum.0.forward"],
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_the_reference_calls_record_the_reference_names(tmp_path, case):
    got = run("tbprobe", case, str(tmp_path / "dump"))
    assert got["names"] == EXPECTED[case]
    if case == "rank":
        assert got["rank_dir"] == "rank3"
    if case == "custom":
        assert got["restored"]
        # a keyword stays a keyword, as msprobe records it (the call was rebuilt, scale=3.0 moved into a position)
        (dump,) = glob.glob(os.path.join(str(tmp_path / "dump"), "step0", "*", "dump.json"))
        with open(dump) as f:
            inner = json.load(f)["data"]["mylib.fused_op.0.forward"]
        assert len(inner["input_args"]) == 1 and inner["input_kwargs"] == {"scale": {"type": "float", "value": 3.0}}


@pytest.mark.peers
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_the_reference_calls_match_msprobe(tmp_path, case):
    need_peers()
    out = {}
    for tool, python in (("msprobe", PEER_PYTHON), ("tbprobe", sys.executable)):
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(HERE)))
        proc = subprocess.run([python, os.path.join(HERE, "reference_api_cases.py"), tool, case,
                               str(tmp_path / tool)], capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[tool] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tbprobe"] == out["msprobe"]


def test_a_custom_api_at_debug_level_or_outside_a_collected_step_only_calls_the_function(tmp_path):
    lib = types.ModuleType("mylib")
    lib.fused_op = fused_op
    x = torch.randn(3)
    dbg = make_debugger(tmp_path, level="debug", steps=1)
    dbg.register_custom_api(lib, "fused_op", api_prefix="Fused")
    assert torch.equal(lib.fused_op(x), fused_op(x))       # not collecting: the function itself
    dbg.start()
    y = lib.fused_op(x)                                     # debug: only what save() is given
    dbg.save(y, "y")
    dbg.stop()
    dbg.step()
    dbg.close()
    assert lib.fused_op is fused_op                         # close() put it back
    (debug_json,) = glob.glob(os.path.join(str(tmp_path / "dump"), "**", "debug.json"), recursive=True)
    with open(debug_json) as f:
        text = f.read()
    assert '"y' in text and "Fused." not in text


def test_bad_arguments_are_clear_errors(tmp_path):
    dbg = make_debugger(tmp_path, level="L1", steps=1)
    lib = types.ModuleType("mylib")
    with pytest.raises(TbprobeError, match="has no attribute 'nope'"):
        dbg.register_custom_api(lib, "nope")
    lib.fused_op = fused_op
    with pytest.raises(TbprobeError, match="api_prefix must be a str"):
        dbg.register_custom_api(lib, "fused_op", api_prefix=3)
    with pytest.raises(TbprobeError, match="must be a torch.nn.Module"):
        module_dump("not a module", "x")
    with pytest.raises(TbprobeError, match="non-empty str"):
        module_dump(torch.nn.Linear(2, 2), "")
    for bad in ([3], [2, 1], [-1, 2], "0-3", [0, 1.5]):
        with pytest.raises(TbprobeError, match="token_range"):
            dbg.start(token_range=bad)
    with pytest.raises(TbprobeError, match="token_range needs the model"):
        dbg.start(token_range=[0, 1])
    assert not dbg.session.active        # refused before anything was switched on
    with pytest.raises(TbprobeError, match="rank_id must be an int >= 0"):
        dbg.start(rank_id=-1)
    dbg.close()
    module_dump_end()            # nothing open: nothing to do


def test_module_dump_at_l0_changes_nothing(tmp_path, caplog):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    with caplog.at_level(logging.INFO, logger="tbprobe.collector"):
        dbg.start(model=model)
        dbg.module_dump(model[0], "first")
        model(torch.randn(2, 4)).sum().backward()
        dbg.module_dump_end()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert any("records every module already" in r.getMessage() for r in caplog.records)
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump.json")) as f:
        names = json.load(f)["data"]
    assert "Module.0.Linear.forward.0" in names and not any(".first." in n for n in names)


def test_scheduled_tokens_and_is_enhanced_are_taken_with_a_warning(tmp_path, caplog):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0, 1])
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        for _ in range(2):
            dbg.start(scheduled_tokens={"req-1": 4})
            torch.ones(2).sum()
            dbg.stop()
            dbg.step()
        seed_all(7, is_enhanced=True)
    dbg.close()
    warned = [r.getMessage() for r in caplog.records]
    assert sum("scheduled_tokens" in m for m in warned) == 1           # once, not every step
    assert any("is_enhanced" in m for m in warned)
    assert len(rank_dirs(str(tmp_path / "dump"), 1)) == 1               # both steps collected whole
    assert torch.initial_seed() == 7


def test_one_debugger_per_dump_path_and_calls_on_the_class(tmp_path, caplog):
    """As the reference's debugger is one per process: constructing again with an open debugger's dump_path
    gives it back (two would hook twice and write the same step folders), and PrecisionDebugger.step() on the
    class acts on the debugger made last. Other dump paths, and a closed debugger's, get a new one."""
    import inspect

    assert hasattr(PrecisionDebugger, "step") and "token_range" in inspect.signature(PrecisionDebugger.start).parameters
    path = str(tmp_path / "dump")
    first = PrecisionDebugger(dump_path=path, level="L1", step=[0, 1])
    assert PrecisionDebugger(dump_path=path, level="L1", step=[0, 1]) is first
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        assert PrecisionDebugger(dump_path=path, level="mix", step=[0, 1]) is first
    warned = [r.getMessage() for r in caplog.records if "open already" in r.getMessage()]
    assert len(warned) == 1 and "level 'mix' (open: 'L1')" in warned[0]   # the setting not taken is named
    other = PrecisionDebugger(dump_path=str(tmp_path / "other"), level="L1", step=[0])
    assert other is not first
    first.start()
    torch.ones(2).sum()
    first.stop()
    PrecisionDebugger.step()          # on the class: the debugger made last, `other`
    assert other.current_step == 1 and first.current_step == 0
    first.step()
    first.close()
    again = PrecisionDebugger(dump_path=path, level="L1", step=[0])
    assert again is not first
    again.close()
    other.close()


def test_module_dump_of_a_module_with_parameters_records_them(tmp_path):
    # module_dump hooks the module outside start()'s attach: one with parameters of its own raised inside tbprobe
    # (the bookkeeping of its model's parameter hooks was not set up), and the module was not recorded
    torch.manual_seed(0)
    fc = torch.nn.Linear(4, 4)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    dbg.start()
    dbg.module_dump(fc, "fc")
    fc(torch.randn(2, 4)).sum().backward()
    dbg.module_dump_end()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"), 0)[0], "dump.json")) as f:
        data = json.load(f)["data"]
    assert sorted(data["Module.fc.Linear.forward.0"]["parameters"]) == ["bias", "weight"]


_SEED_ALL = """
import json, sys
import torch
from tbprobe import PrecisionDebugger, seed_all
seed_all(0, rm_dropout=True)
seed_all(0, rm_dropout=True)                 # (again: the original wrapped once)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 1)
        self.drop, self.drop2d, self.drop3d = torch.nn.Dropout(0.5), torch.nn.Dropout2d(0.5), torch.nn.Dropout3d(0.5)

    def forward(self, x):
        h = self.drop2d(self.drop(self.conv(x)))
        return self.drop3d(h.unsqueeze(0))

model = Net()
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="L1", step=[0])
dbg.start(model)
y = model(torch.ones(1, 2, 4, 4))
y.sum().backward()
dbg.stop()
dbg.step()
seed_all(0, mode=True)
on = torch.are_deterministic_algorithms_enabled()
seed_all(0, mode=False)
try:
    seed_all(0, rm_dropout="yes")
    refused = False
except Exception as exc:
    refused = "rm_dropout" in str(exc)
print(json.dumps({"zeros": int((y == 0).sum()), "on": on, "off": not torch.are_deterministic_algorithms_enabled(),
                  "refused": refused}))
"""


def test_seed_all_removes_every_dropout_and_mode_false_turns_determinism_off(tmp_path):
    """seed_all(rm_dropout=True) replaced F.dropout alone, so nn.Dropout2d/3d still zeroed values and two runs
    still differed; msprobe sets p=0 in dropout, dropout2d and dropout3d, whose calls it still records (so did
    tbprobe's replacement not: the L1 records of nn.Dropout were gone). mode=False after mode=True turns
    determinism off again, as msprobe's; a non-bool rm_dropout is refused, as msprobe refuses it. (In a process of
    its own: the replacement is for the rest of the process.)"""
    dump = str(tmp_path / "dump")
    proc = subprocess.run([sys.executable, "-c", _SEED_ALL, dump], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"zeros": 0, "on": True, "off": True, "refused": True}
    (path,) = glob.glob(os.path.join(dump, "step0", "*", "dump.json"))
    with open(path) as f:
        data = json.load(f)["data"]
    for name in ("dropout", "dropout2d", "dropout3d"):
        entry = data[f"Functional.{name}.0.forward"]
        assert {"type": "float", "value": 0.0} in list(entry["input_kwargs"].values()) + entry["input_args"], name
