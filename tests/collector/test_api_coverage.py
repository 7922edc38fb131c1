"""L1 records the calls the reference records, under its names: operator forms, aliases, torch.linalg,
constructors, reflected operators, the optimizer's foreach work and gradient clipping (api_zoo.py calls each)."""
import glob
import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from conftest import PEER_PYTHON, need_peers, stack_lines

from tbprobe.collector.pytorch import api_names

HERE = os.path.dirname(os.path.abspath(__file__))


def zoo(tmp_path, tool: str, risk: str) -> Counter:
    """Recorded forward calls of api_zoo.py as {"Prefix.api": count}."""
    python = PEER_PYTHON if tool == "msprobe" else sys.executable
    out = subprocess.run([python, os.path.join(HERE, "api_zoo.py"), tool, risk, str(tmp_path / f"{tool}_{risk}")],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    names = json.loads(out.strip().splitlines()[-1])
    return Counter(n.rsplit(".", 2)[0] for n in names)


def zoo_stacks(tmp_path, tool: str, risk: str) -> dict:
    """{record name: stack.json's lines, each file's path from site-packages/ on} of the api_zoo.py run zoo() made."""
    (path,) = glob.glob(str(tmp_path / f"{tool}_{risk}" / "**" / "stack.json"), recursive=True)
    with open(path) as f:
        return stack_lines(json.load(f))


def test_a_function_with_several_names_gets_the_one_the_reference_uses():
    assert api_names.lookup(torch.mm) == ("Torch", "mm")          # torch.mm is torch.dsmm and torch.spmm
    assert api_names.lookup(torch.Tensor.neg) == ("Tensor", "neg")    # Tensor.__neg__ is Tensor.neg
    assert api_names.lookup(torch.Tensor.abs) == ("Tensor", "abs")
    assert api_names.lookup(F.threshold) == ("Functional", "threshold")
    assert api_names.lookup(torch.linalg.vector_norm) == ("Torch", "vector_norm")
    assert api_names.lookup(torch.linalg.norm) == ("Torch", "norm")
    for never in (torch.Tensor.copy_, torch.Tensor.__getitem__, torch.Tensor.__invert__, torch.zeros, torch.randn,
                  torch._foreach_add_, torch.Tensor.new_zeros, torch.Tensor.positive):
        assert api_names.lookup(never) is None, never


@pytest.fixture(scope="module")
def tbprobe_all(tmp_path_factory):
    return zoo(tmp_path_factory.mktemp("zoo"), "tbprobe", "ALL")


def test_operator_forms_are_recorded_as_the_reference_records_them(tbprobe_all):
    rec = tbprobe_all
    # `-x`, `+x`, `abs(x)`, `~b`, `x /= y`, `3 & i`, `1 << i`: Python's slots, which the reference does not patch
    for name in ("Tensor.__neg__", "Tensor.__pos__", "Tensor.__abs__", "Tensor.__invert__", "Tensor.__itruediv__",
                 "Tensor.__rand__", "Tensor.__rlshift__", "Tensor.__rrshift__", "Tensor.positive", "Tensor.div_"):
        assert name not in rec, name
    assert rec["Tensor.neg"] == 1 and rec["Tensor.abs"] == 1      # x.neg() and x.abs() only
    assert rec["Torch.neg"] == 1 and rec["Torch.abs"] == 1
    # `2 / x` and `2 // x` are Python functions: the calls inside them are recorded
    assert "Tensor.__rtruediv__" not in rec and "Tensor.__rdiv__" not in rec and "Tensor.__rfloordiv__" not in rec
    # (clip_grad_norm_ divides a float by a tensor too)
    assert rec["Tensor.reciprocal"] == 2 and rec["Torch.floor_divide"] == 1
    assert rec["Tensor.__imod__"] == 2 and rec["Tensor.__iadd__"] == 2   # `z %= y`, z.__imod__(y); the same for +=
    assert rec["Tensor.__setitem__"] == 2 and "Tensor.__getitem__" not in rec


def test_python_functions_that_skip_torchs_dispatch_are_recorded_under_their_own_names(tbprobe_all):
    """F.sigmoid (`input.sigmoid()`) and F.upsample (which calls F.interpolate) never hand themselves to the operator
    mode: they were recorded as Tensor.sigmoid and Functional.interpolate, where msprobe, which wraps F's
    attributes, records Functional.sigmoid. And `0.5 in x`, reversed(x): Python's protocol, in tbprobe's never-recorded
    list, hid the operators inside them, which msprobe records (transformers' padding check runs `in` on every
    forward of its encoders), and shifted the numbers of every later call of those operators."""
    rec = tbprobe_all
    for name in ("sigmoid", "tanh", "upsample", "upsample_nearest", "upsample_bilinear"):
        assert rec[f"Functional.{name}"] == 1, name
    assert "Tensor.sigmoid" not in rec and "Tensor.tanh" not in rec and "Functional.interpolate" not in rec
    # `0.5 in x` is (0.5 == x).any(), beside `x == y` and bool(b.any()); reversed(x) is x.flip(0), beside x.flip(0)
    assert rec["Tensor.__eq__"] == 2 and rec["Tensor.any"] == 2 and rec["Tensor.flip"] == 2
    assert "Tensor.__contains__" not in rec and "Tensor.__reversed__" not in rec


def test_aliases_linalg_and_training_work_are_recorded_as_the_reference_records_them(tbprobe_all):
    rec = tbprobe_all
    assert rec["Torch.mm"] == 1 and "Torch.dsmm" not in rec
    # torch.linalg under the Torch prefix; clip_grad_norm_ adds a _foreach_norm and a vector_norm
    assert rec["Torch.vector_norm"] == 2 and rec["Torch.norm"] == 2 and rec["Torch.inv"] == 1
    assert rec["Torch._foreach_norm"] == 2
    # the foreach AdamW step and the plumbing the reference never records
    for name in ("Torch._foreach_add_", "Torch._foreach_mul_", "Torch._foreach_lerp_", "Torch._foreach_add",
                 "Torch.zeros", "Torch.randn", "Torch.tensor", "Torch.empty", "Tensor.new_zeros", "Tensor.clone",
                 "Tensor.copy_", "Tensor.zero_", "Tensor.uniform_", "Torch.complex", "Torch.view_as_real",
                 "Tensor.trace", "Torch.unique", "Torch.meshgrid", "Torch.allclose", "Tensor.conj"):
        assert name not in rec, name
    # recorded at ALL (low risk), as the reference does
    for name in ("Tensor.view_as", "Tensor.stride", "Tensor.numpy", "Tensor.__bool__", "Torch.scalar_tensor",
                 "Torch.arange", "Tensor.t"):
        assert rec[name] >= 1, name


# rms_norm is one of tbprobe's EXTRAS (an operator the reference does not know). At CORE ("matrix multiplication,
# convolution, normalisation, embedding, attention") tbprobe also keeps F.linear and einsum, which msprobe's CORE
# list lacks (docs/compatibility.md).
@pytest.mark.parametrize("risk, extra", [
    ("default", {"Functional.rms_norm": 1}), ("ALL", {"Functional.rms_norm": 1}),
    ("CORE", {"Functional.rms_norm": 1, "Functional.linear": 1, "Torch.einsum": 1})])
def test_every_call_is_recorded_as_msprobe_records_it(tmp_path, risk, extra):
    need_peers()
    ours, theirs = zoo(tmp_path, "tbprobe", risk), zoo(tmp_path, "msprobe", risk)
    assert sum(theirs.values()) > (5 if risk == "CORE" else 60)
    assert dict(ours - theirs) == extra
    assert dict(theirs - ours) == {}
    # and each call's stack: from the call's line on, with none of tbprobe's frames (api_zoo.py imports tbprobe
    # through a path holding "/../", as scripts that put their checkout on sys.path do)
    our_stacks, their_stacks = zoo_stacks(tmp_path, "tbprobe", risk), zoo_stacks(tmp_path, "msprobe", risk)
    both = our_stacks.keys() & their_stacks.keys()
    assert len(both) >= sum(theirs.values())
    differ = sorted(n for n in both if our_stacks[n] != their_stacks[n])
    assert not differ, (differ[:5], our_stacks[differ[0]], their_stacks[differ[0]])


def test_the_recorded_functions_are_those_msprobe_patches(tmp_path):
    """The whole table, not only the calls above, against the functions msprobe replaces at L1."""
    need_peers()
    out = subprocess.run([PEER_PYTHON, os.path.join(HERE, "msprobe_patched.py"), str(tmp_path / "patched")],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    patched = json.loads(out.strip().splitlines()[-1])
    patched["Torch"] = sorted(set(patched["Torch"]) | set(patched.pop("linalg")))
    ours = {}
    for prefix, name in api_names._TABLE.values():
        ours.setdefault(prefix, set()).add(name)
    spaces = {"Tensor": torch.Tensor, "Torch": torch, "Functional": F}
    for prefix, space in spaces.items():
        theirs = set(patched[prefix])
        assert ours[prefix] - theirs <= api_names.EXTRAS, prefix
        missing = set()
        for name in theirs - ours[prefix]:
            obj = getattr(space, name, None) or getattr(torch.linalg, name, None)
            # the same function recorded under another name: F.conv2d is torch.conv2d, torch.mm is torch.dsmm
            if api_names.lookup(obj) is not None:
                continue
            missing.add(name)
        # manual_seed: no tensor in or out; __rdiv__: the mode records the calls inside it (see the test above)
        assert missing <= {"manual_seed", "__rdiv__"}, (prefix, sorted(missing))
