"""Torch calls made inside a backward pass are recorded (backward_pass.py): activation checkpointing's recomputed
forward and, with reentrant checkpointing, the backward of the recomputed graph; a custom Function's backward,
in loss.backward(), torch.autograd.backward and torch.autograd.grad."""
import json
import os
import subprocess
import sys

import pytest
from conftest import PEER_PYTHON, need_peers

HERE = os.path.dirname(os.path.abspath(__file__))


def run(tmp_path, tool, level, reentrant, plain=False):
    python = PEER_PYTHON if tool == "msprobe" else sys.executable
    out = tmp_path / f"{tool}_{level}_{reentrant}"
    cmd = [python, os.path.join(HERE, "backward_run.py"), tool, level, str(int(reentrant)), str(out)]
    lines = subprocess.run(cmd + (["none"] if plain else []), capture_output=True, text=True, timeout=600,
                           check=True).stdout.strip().splitlines()
    return json.loads(lines[-2]), json.loads(lines[-1])


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_reentrant_checkpointing_records_the_recomputed_calls_and_their_backward(tmp_path, level):
    records, _ = run(tmp_path, "tbprobe", level, True)
    # the blocks' forward ran under no_grad (linear.0-1, gelu.0-1, __mul__.0-1, __add__.0-1); then the head's
    # linear.2 and Scale's __mul__.2. The backward pass recomputes block 1, then block 0, and runs their backward.
    for n in (3, 4):
        for name in (f"Functional.linear.{n}", f"Functional.gelu.{n - 1}", f"Tensor.__mul__.{n}",
                     f"Tensor.__add__.{n}"):
            assert f"{name}.forward" in records and f"{name}.backward" in records, name
    assert "Functional.linear.0.backward" not in records     # the first forward ran without a graph
    # the custom Function's backward calls torch (its `+` is __add__.2, between the two recomputations), in
    # loss.backward() and again in torch.autograd.grad
    assert "Torch.sin.0.forward" in records and "Tensor.__add__.2.forward" in records
    assert "Torch.sin.1.forward" in records


def test_non_reentrant_checkpointing_records_the_recomputation(tmp_path):
    records, _ = run(tmp_path, "tbprobe", "L1", False)
    assert "Functional.linear.0.backward" in records and "Functional.linear.1.backward" in records
    # recomputation stops once it has what the backward needs, by raising inside the call that saves the last
    # tensor (each block's gelu): that call is recorded with its inputs alone, as a call that raised
    assert "Functional.linear.3.forward" in records and "Functional.linear.4.forward" in records
    dump = json.load(open(next((tmp_path / "tbprobe_L1_False" / "step0").iterdir()) / "dump.json"))["data"]
    assert sorted(dump["Functional.gelu.2.forward"]) == sorted(dump["Functional.gelu.3.forward"]) == [
        "input_args", "input_kwargs"]
    assert "Torch.sin.0.forward" in records and "Torch.sin.1.forward" in records


@pytest.mark.parametrize("reentrant", [True, False])
def test_losses_and_gradients_are_unchanged(tmp_path, reentrant):
    _, plain = run(tmp_path / "plain", "tbprobe", "L1", reentrant, plain=True)
    for level in ("L1", "mix"):
        _, ours = run(tmp_path, "tbprobe", level, reentrant)
        assert ours == plain, level


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_reentrant_checkpointing_is_recorded_as_msprobe_records_it(tmp_path, level):
    need_peers()
    ours, _ = run(tmp_path, "tbprobe", level, True)
    theirs, _ = run(tmp_path, "msprobe", level, True)
    assert ours == theirs


def checkpoint_stop(tmp_path, tool):
    python = PEER_PYTHON if tool == "msprobe" else sys.executable
    out = subprocess.run([python, os.path.join(HERE, "checkpoint_stop_run.py"), tool, str(tmp_path / tool)],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_recomputation_stopped_inside_a_module_records_its_parameters(tmp_path):
    data = checkpoint_stop(tmp_path, "tbprobe")
    # each block's recomputation stops in its Linear, the last module that saves a tensor: a call that raised,
    # with a null output and the module's parameters (as msprobe records it; a module whose forward raises
    # anything else is recorded with its inputs alone)
    for b in (0, 1):
        stopped = data[f"Module.blocks.{b}.fc.Linear.forward.1"]
        assert stopped["output"] == [None]
        assert sorted(stopped["parameters"]) == ["bias", "weight"]
        assert stopped["parameters"] == data[f"Module.blocks.{b}.fc.Linear.forward.0"]["parameters"]
        assert stopped["input_args"] == data[f"Module.blocks.{b}.fc.Linear.forward.0"]["input_args"]


def test_a_stopped_recomputation_is_recorded_as_msprobe_records_it(tmp_path):
    need_peers()
    ours, theirs = checkpoint_stop(tmp_path, "tbprobe"), checkpoint_stop(tmp_path, "msprobe")
    assert sorted(ours) == sorted(theirs)     # (the same records; a few are written in another order)
    for name, record in theirs.items():
        assert sorted(ours[name]) == sorted(record), name
        if record.get("output") == [None]:
            assert ours[name]["output"] == [None], name
