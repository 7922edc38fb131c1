"""dump.json: golden reads of every reference dump, the streaming parser against stdlib json, DumpWriter round trips."""
import json
import math

import pytest

from tbprobe.errors import FormatError
from tbprobe.formats import dump_json
from tbprobe.formats.dump_json import (
    DumpWriter,
    LazyEntries,
    iter_tensor_items,
    load_dump,
    save_dump,
    tensor_item,
)

from .conftest import OWN, REF, REF_DUMPS


def same(a, b) -> bool:
    """Deep equality where NaN equals NaN and dict key order matters (a LazyEntries compares as its dict)."""
    a, b = (dict(x.items()) if isinstance(x, LazyEntries) else x for x in (a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


# (file relative to the reference fixtures, task, level, number of entries)
GOLDEN_COUNTS = [
    ("inputs/npu_stat/step0/rank0/dump.json", "statistics", "mix", 46),
    ("inputs/bench_stat/step0/rank0/dump.json", "statistics", "mix", 42),
    ("inputs/npu_md5/step0/rank0/dump.json", "statistics", "mix", 46),
    ("inputs/npu_tensor/step0/rank0/dump.json", "tensor", "mix", 46),
    ("inputs/npu_struct/step0/rank0/dump.json", "structure", "mix", 0),
    ("inputs/npu_dist/step0/rank1/dump.json", "statistics", "mix", 19),
    ("collector/statistics_mix_step0/dump.json", "statistics", "mix", 24),
    ("collector/statistics_md5_L1_step0/dump.json", "statistics", "L1", 16),
    ("collector/statistics_xor_L1_step0/dump.json", "statistics", "L1", 16),
    ("collector/tensor_L0_step0/dump.json", "tensor", "L0", 8),
    ("outputs/merge_json/step0/rank0/dump.json", "statistics", "mix", 52),
]


def test_every_reference_dump_is_covered():
    assert len(REF_DUMPS) == 17
    assert {str(p.relative_to(REF)) for p in REF_DUMPS} >= {g[0] for g in GOLDEN_COUNTS}


@pytest.mark.parametrize("rel,task,level,count", GOLDEN_COUNTS)
def test_golden_counts(rel, task, level, count):
    d = load_dump(REF / rel)
    assert (d.task, d.level, d.framework, len(d.entries)) == (task, level, "pytorch", count)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("path", REF_DUMPS, ids=lambda p: str(p.relative_to(REF)))
def test_every_reference_dump_equals_stdlib_parse(path, lazy):
    expected = json.loads(path.read_text())
    d = load_dump(path, lazy=lazy)
    assert isinstance(d.entries, LazyEntries if lazy else dict)
    assert d.dump_data_dir == expected["dump_data_dir"]
    assert list(d.entries) == list(expected["data"])  # file (execution) order kept
    assert same(d.entries, expected["data"])


def test_npu_stat_values_and_infinity_tokens():
    d = load_dump(REF / "inputs/npu_stat/step0/rank0/dump.json")
    names = list(d.entries)
    assert names[:2] == ["Functional.linear.0.forward", "Module.embed.Linear.forward.0"]
    assert names[-1] == "Module.embed.Linear.parameters_grad.0"
    w = d.entries["Module.layers.1.fc.Linear.forward.0"]["parameters"]["weight"]
    assert w["Max"] == 0.3999595046043396 and w["shape"] == [8, 8] and w["requires_grad"] is True
    out = d.entries["Torch.exp.0.forward"]["output"][0]
    assert out["Max"] == math.inf and out["Mean"] == math.inf and out["Min"] == 0.0
    assert d.entries["Torch.exp.0.forward"]["input_args"][0]["Max"] == 2024.7144775390625
    infs = sum(1 for e in d.entries.values() for _, it in iter_tensor_items(e)
               for k in ("Max", "Min", "Mean", "Norm") if isinstance(it.get(k), float) and math.isinf(it[k]))
    assert infs == 3


def test_md5_xor_and_tensor_fields():
    md5 = load_dump(REF / "collector/statistics_md5_L1_step0/dump.json")
    assert md5.entries["Functional.linear.0.forward"]["output"][0]["md5"] == "c1b70d3e"
    xor = load_dump(REF / "collector/statistics_xor_L1_step0/dump.json")
    item = xor.entries["Functional.linear.0.forward"]["input_args"][0]
    assert item == {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3, 8],
                    "md5": "0x82938101026e32b7", "requires_grad": False}
    assert list(item) == ["type", "dtype", "shape", "md5", "requires_grad"]
    tensor = load_dump(REF / "collector/tensor_L0_step0/dump.json")
    assert tensor.dump_data_dir == "/home/user/work/out/dump/step0/proc13323/dump_tensor_data"
    first = tensor.entries["Module.fc1.Linear.forward.0"]["input_args"][0]
    assert first["data_name"] == "Module.fc1.Linear.forward.0.input.0.pt"


def test_edge_cases_nan_nested_kwargs_process_group():
    d = load_dump(OWN / "edge_dump.json")
    cat = d.entries["Torch.cat.0.forward"]
    keys = [k for k, _ in iter_tensor_items(cat)]
    assert keys == ["input.0.0", "input.0.1", "input.dim", "output.0"]
    first = cat["input_args"][0][0]
    assert math.isnan(first["Max"]) and first["Min"] == -math.inf
    assert cat["output"][0]["Max"] == math.inf
    ar = dict(iter_tensor_items(d.entries["Distributed.all_reduce.0.forward"]))
    assert ar["input.group"]["group_ranks"] == [0, 1] and ar["input.0"]["shape"] == []
    grads = [k for k, _ in iter_tensor_items(d.entries["Module.fc.Linear.parameters_grad.0"])]
    assert grads == ["weight.0", "weight.1"]
    sl = dict(iter_tensor_items(d.entries["Tensor.__getitem__.0.forward"]))["input.1"]
    assert sl == {"type": "slice", "value": [0, 2, None]}


def test_param_keys_of_a_module_and_parameters_grad():
    d = load_dump(REF / "inputs/npu_stat/step0/rank0/dump.json")
    assert [k for k, _ in iter_tensor_items(d.entries["Module.layers.1.fc.Linear.forward.0"])] == [
        "input.0", "output.0", "parameters.weight", "parameters.bias"]
    assert [k for k, _ in iter_tensor_items(d.entries["Module.layers.1.fc.Linear.parameters_grad.0"])] == [
        "bias", "weight"]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("block", [1, 7, 64, 333, 4096])
def test_streaming_with_tiny_blocks_matches(monkeypatch, block, lazy):
    """Entries, keys and numbers split across read blocks at every possible place still parse the same."""
    monkeypatch.setattr(dump_json, "_BLOCK", block)
    for rel in ("inputs/npu_stat/step0/rank0/dump.json", "collector/statistics_xor_L1_step0/dump.json"):
        path = REF / rel
        assert same(load_dump(path, lazy).entries, json.loads(path.read_text())["data"])
    edge = load_dump(OWN / "edge_dump.json", lazy).entries
    assert same(edge, json.loads((OWN / "edge_dump.json").read_text())["data"])


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("layout", ["minified", "indent2", "crlf", "data_first", "indent1"])
def test_other_json_layouts(tmp_path, monkeypatch, layout, lazy):
    """Files not laid out like the reference (the fast path's cut finds no entry boundary) parse the same."""
    monkeypatch.setattr(dump_json, "_BLOCK", 512)
    doc = json.loads((REF / "inputs/npu_stat/step0/rank0/dump.json").read_text())
    if layout == "data_first":
        doc = {"data": doc["data"], "task": doc["task"], "level": doc["level"], "framework": doc["framework"],
               "dump_data_dir": doc["dump_data_dir"]}
    text = {"minified": lambda: json.dumps(doc, separators=(",", ":")),
            "indent2": lambda: json.dumps(doc, indent=2),
            "crlf": lambda: json.dumps(doc, indent=1).replace("\n", "\r\n"),
            "data_first": lambda: json.dumps(doc, indent=1),
            "indent1": lambda: json.dumps(doc, indent=1)}[layout]()
    p = tmp_path / "dump.json"
    p.write_text(text)
    d = load_dump(p, lazy)
    assert same(d.entries, doc["data"]) and d.task == "statistics"


def test_non_ascii_names_and_values(tmp_path):
    p = tmp_path / "dump.json"
    doc = {"task": "statistics", "level": "L0", "framework": "mindspore", "dump_data_dir": None,
           "data": {"Cell.网络.Dense.forward.0": {"input_args": [{"type": "str", "value": "é✓"}]}}}
    p.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    assert load_dump(p).entries == doc["data"]


# ---------------------------------------------------------------------------------------------- writing
@pytest.mark.parametrize("path", REF_DUMPS, ids=lambda p: str(p.relative_to(REF)))
@pytest.mark.parametrize("indent", [None, 1])
def test_dump_writer_round_trip(tmp_path, path, indent):
    src = load_dump(path)
    out = tmp_path / "rank0" / "dump.json"
    with DumpWriter(out, src.task, src.level, src.framework, src.dump_data_dir, indent=indent) as w:
        for name, entry in src.entries.items():
            w.add(name, entry)
    again = load_dump(out)
    assert (again.task, again.level, again.framework, again.dump_data_dir) == (
        src.task, src.level, src.framework, src.dump_data_dir)
    assert list(again.entries) == list(src.entries)
    assert same(again.entries, src.entries)  # includes the key order of every item
    assert same(json.loads(out.read_text())["data"], json.loads(path.read_text())["data"])
    assert [p.name for p in out.parent.iterdir()] == ["dump.json"]  # no temporary file left


def test_writer_emits_reference_tokens_and_key_order(tmp_path):
    out = tmp_path / "dump.json"
    w = DumpWriter(out, "statistics", "L1")
    item = tensor_item("torch.float32", (2, 3), float("nan"), float("-inf"), float("inf"), 1.0, True, md5="0badf00d")
    w.add("Torch.matmul.0.forward", {"input_args": [item], "input_kwargs": {}, "output": []})
    xor = tensor_item("torch.float16", [4], md5="0x0000000000000001", requires_grad=False, stats=False)
    w.add("Torch.matmul.1.forward", {"input_args": [xor], "input_kwargs": {}, "output": []})
    assert len(w) == 2 and "Torch.matmul.0.forward" in w
    assert not out.exists()  # nothing is written before close
    w.close()
    text = out.read_text()
    assert '"Max": NaN, "Min": -Infinity, "Mean": Infinity' in text
    first = load_dump(out).entries["Torch.matmul.0.forward"]["input_args"][0]
    assert list(first) == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad", "md5"]
    second = load_dump(out).entries["Torch.matmul.1.forward"]["input_args"][0]
    assert list(second) == ["type", "dtype", "shape", "md5", "requires_grad"]


def test_writer_incremental_replace_and_numpy_scalars(tmp_path):
    np = pytest.importorskip("numpy")
    out = tmp_path / "dump.json"
    w = DumpWriter(out, "statistics", "L0")
    w.add("Module.a.Linear.forward.0", {"output": []})
    w.add("Module.b.Linear.forward.0", {"output": [tensor_item("torch.float32", [1], np.float32(0.5), np.float64(-1),
                                                               np.float32(0.25), np.float32("nan"), False)]})
    w.add("Module.a.Linear.forward.0", {"output": [None]})  # same name again: replaced, position kept
    w.close()
    d = load_dump(out)
    assert list(d.entries) == ["Module.a.Linear.forward.0", "Module.b.Linear.forward.0"]
    assert d.entries["Module.a.Linear.forward.0"] == {"output": [None]}
    b = d.entries["Module.b.Linear.forward.0"]["output"][0]
    assert b["Max"] == 0.5 and b["Min"] == -1.0 and math.isnan(b["Norm"])
    with pytest.raises(ValueError):
        w.add("late", {})


def test_writer_exception_leaves_no_file(tmp_path):
    out = tmp_path / "dump.json"
    with pytest.raises(RuntimeError):
        with DumpWriter(out, "statistics", "L0") as w:
            w.add("Module.a.Linear.forward.0", {"output": []})
            raise RuntimeError("training crashed")
    assert list(tmp_path.iterdir()) == []
    w2 = DumpWriter(out, "statistics", "L0")
    w2.add("x", {"output": [object()]})  # not serialisable: the write fails, nothing appears
    with pytest.raises(TypeError):
        w2.close()
    assert list(tmp_path.iterdir()) == []


def test_empty_dump_round_trip(tmp_path):
    out = tmp_path / "dump.json"
    DumpWriter(out, "structure", "mix").close()
    assert json.loads(out.read_text()) == {"task": "structure", "level": "mix", "framework": "pytorch",
                                           "dump_data_dir": None, "data": {}}
    assert load_dump(out).entries == {}


@pytest.mark.parametrize("indent", [None, 1])
def test_save_dump_rewrites_a_loaded_file(tmp_path, indent):
    src = load_dump(REF / "inputs/npu_md5/step0/rank0/dump.json")
    save_dump(src, tmp_path / "dump.json", indent=indent)
    assert same(load_dump(tmp_path / "dump.json").entries, src.entries)
    if indent == 1:  # the reference's exact layout
        assert (tmp_path / "dump.json").read_text() == (REF / "inputs/npu_md5/step0/rank0/dump.json").read_text()


# ------------------------------------------------------------------------------------------ lazy entries
def test_lazy_entries_behave_like_a_read_only_dict():
    path = REF / "inputs/npu_stat/step0/rank0/dump.json"
    lazy, eager = load_dump(path).entries, load_dump(path, lazy=False).entries
    assert len(lazy) == 46 and "Torch.exp.0.forward" in lazy and "nope" not in lazy
    assert list(lazy) == list(eager) and lazy.get("nope") is None
    assert same(lazy["Torch.exp.0.forward"], eager["Torch.exp.0.forward"])
    assert lazy["Torch.exp.0.forward"] is not lazy["Torch.exp.0.forward"]  # decoded per access
    assert lazy.raw("Torch.exp.0.forward").startswith("{") and json.loads(lazy.raw("Torch.exp.0.forward"))
    assert same(lazy.to_dict(), eager)
    lazy.validate()


def _corrupt_middle_entry(tmp_path, replacement: str):
    """The reference dump with one entry in the middle of the file broken."""
    text = (REF / "inputs/npu_stat/step0/rank0/dump.json").read_text()
    start = text.index('  "Torch.exp.0.forward": {')
    body = text.index("{", start)
    p = tmp_path / "dump.json"
    p.write_text(text[:body] + replacement + text[body + 1:])
    return p


def test_lazy_reports_a_broken_entry_when_it_is_used(tmp_path):
    p = _corrupt_middle_entry(tmp_path, '{"oops": tru, ')
    d = load_dump(p)  # the entry boundaries are fine: the load succeeds
    assert len(d.entries) == 46
    assert d.entries["Functional.linear.0.forward"]["input_args"][0]["Max"] == 2.825500726699829
    with pytest.raises(FormatError) as e:
        d.entries["Torch.exp.0.forward"]
    assert str(e.value) == f'{p}: entry "Torch.exp.0.forward": invalid JSON (expected a value at character 9 of the entry)'
    with pytest.raises(FormatError, match="Torch.exp.0.forward"):
        d.entries.validate()
    with pytest.raises(FormatError, match="invalid JSON at line 659 column 35: expected a value"):
        load_dump(p, lazy=False)  # eager finds it at once


def test_lazy_checks_entry_shape_at_load(tmp_path):
    p = _corrupt_middle_entry(tmp_path, '[1, {')
    with pytest.raises(FormatError) as e:
        load_dump(p)
    assert 'entry "Torch.exp.0.forward" must be an object' in str(e.value)
    assert str(e.value).startswith(f"{p}: invalid JSON at line ")
