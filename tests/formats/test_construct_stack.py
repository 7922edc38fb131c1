"""construct.json and stack.json: both forms read, the reference's form written, golden values."""
import json

import pytest

from tbprobe.formats.construct_json import Construct, load_construct, write_construct
from tbprobe.formats.stack_json import load_stack, write_stack

from .conftest import OWN, REF

CONSTRUCTS = sorted(REF.glob("**/construct.json"))
STACKS = sorted(REF.glob("**/stack.json"))


@pytest.mark.parametrize("path", CONSTRUCTS, ids=lambda p: str(p.relative_to(REF)))
def test_every_reference_construct(path):
    doc = json.loads(path.read_text())
    c = load_construct(path)
    assert list(c.parents) == list(doc)
    assert all(c.parents[k] == (v or None) for k, v in doc.items())
    assert c.micro_steps == {} and c.megatron_micro_step_number is None


@pytest.mark.parametrize("path", CONSTRUCTS + STACKS, ids=lambda p: str(p.relative_to(REF)))
def test_rewrite_is_byte_identical(tmp_path, path):
    out = tmp_path / path.name
    if path.name == "construct.json":
        write_construct(out, load_construct(path).parents)
    else:
        stacks = load_stack(path)
        write_stack(out, {name: stacks.get(name) for name in stacks.by_name})
    if "merge_json" in path.parts:  # msprobe's merge tool writes indent 2; its collector (the rest) indent 1
        assert json.loads(out.read_text()) == json.loads(path.read_text())
    else:
        assert out.read_bytes() == path.read_bytes()


def test_construct_golden_values():
    c = load_construct(REF / "inputs/npu_stat/step0/rank0/construct.json")
    assert len(c.parents) == 42
    assert c.parents["Functional.linear.0.forward"] == "Module.embed.Linear.forward.0"
    assert c.parents["Module.embed.Linear.forward.0"] is None
    assert c.parents["Module.layers.0.fc.Linear.forward.0"] == "Module.layers.0.Block.forward.0"
    level_l0 = load_construct(REF / "collector/tensor_L0_step0/construct.json")
    assert list(level_l0.parents)[-1] == "Module.fc1.Linear.backward.0"


def test_megatron_and_old_forms():
    m = load_construct(OWN / "construct_megatron.json")
    assert m.megatron_micro_step_number == 2
    assert m.parents == {
        "Module.module.module.embedding.Embedding.forward.0": None,
        "Functional.embedding.0.forward": "Module.module.module.embedding.Embedding.forward.0",
        "Module.module.module.embedding.Embedding.forward.1": None,  # "" = top level
        "Functional.embedding.1.forward": "Module.module.module.embedding.Embedding.forward.1",
    }
    assert m.micro_steps["Functional.embedding.1.forward"] == 1
    assert m.micro_steps["Module.module.module.embedding.Embedding.forward.0"] == 0
    old = load_construct(OWN / "construct_old.json")
    assert old.parents == {"Module.fc1.Linear.forward.0": None,
                           "Functional.linear.0.forward": "Module.fc1.Linear.forward.0",
                           "Module.fc1.Linear.backward.0": None}


def test_write_construct_round_trip(tmp_path):
    src = load_construct(REF / "inputs/npu_stat/step0/rank0/construct.json")
    out = tmp_path / "construct.json"
    write_construct(out, src.parents)
    assert out.read_bytes() == (REF / "inputs/npu_stat/step0/rank0/construct.json").read_bytes()
    assert load_construct(out) == src
    m = load_construct(OWN / "construct_megatron.json")
    write_construct(out, m.parents, m.micro_steps, m.megatron_micro_step_number)
    assert load_construct(out) == m
    write_construct(out, {})
    assert out.read_text() == "{}" and load_construct(out) == Construct()


@pytest.mark.parametrize("path", STACKS, ids=lambda p: str(p.relative_to(REF)))
def test_every_reference_stack(path):
    doc = json.loads(path.read_text())
    s = load_stack(path)
    assert len(s.stacks) == len(doc)
    for names, lines in doc.values():
        for name in names:
            assert s.get(name) == tuple(lines)


def test_stack_golden_and_interning():
    s = load_stack(REF / "inputs/npu_stat/step0/rank0/stack.json")
    assert len(s.stacks) == 13 and len(s.by_name) == 22
    top = s.get("Module.embed.Linear.forward.0")
    assert top[-1] == "File /home/user/work/make_dump.py, line 47, in <module>, \n y = model(x)"
    assert s.get("Module.embed.Linear.backward.0") == ()  # backward nodes have no stack
    shared = load_stack(REF / "collector/statistics_mix_step0/stack.json")
    a, b = shared.get("Module.fc1.Linear.forward.0"), shared.get("Module.act.ReLU.forward.0")
    assert a is b  # names sharing a record share one tuple


def test_old_stack_form_dedupes():
    s = load_stack(OWN / "stack_old.json")
    assert len(s.by_name) == 3 and len(s.stacks) == 2
    assert s.get("Module.fc1.Linear.forward.0") is s.get("Module.fc2.Linear.forward.0")
    assert s.get("Functional.linear.0.forward") == ("File /a/linear.py, line 5, in forward, \n return F.linear(x, w)",)


def test_write_stack_new_form_round_trip(tmp_path):
    old = load_stack(OWN / "stack_old.json")
    out = tmp_path / "stack.json"
    write_stack(out, {name: old.get(name) for name in old.by_name})
    doc = json.loads(out.read_text())
    assert doc["0"][0] == ["Module.fc1.Linear.forward.0", "Module.fc2.Linear.forward.0"]
    assert doc["1"] == [["Functional.linear.0.forward"],
                        ["File /a/linear.py, line 5, in forward, \n return F.linear(x, w)"]]
    ref = REF / "inputs/npu_stat/step0/rank0/stack.json"
    src = load_stack(ref)
    write_stack(out, {name: src.get(name) for name in src.by_name})
    assert out.read_bytes() == ref.read_bytes()
