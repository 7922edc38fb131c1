"""Tasks tensor and structure: task tensor's .pt files (one for each item that names one, and no other; their names
kept inside the dump whatever the user's names; a tensor subclass saved as a plain tensor; a file that cannot be
written costing that file alone; the files of the side data_mode keeps; summary_mode md5 and xor), and task
structure's names without statistics."""
import json
import os
import zlib

import pytest
import torch
from conftest import dump_of, load_rank, make_debugger, rank_dirs
from run_model import train

from tbprobe import PrecisionDebugger


def test_task_tensor_saves_pt_files_and_structure_has_no_stats(tmp_path):
    (tmp_path / "t").mkdir()
    dbg = make_debugger(tmp_path / "t", level="L0", task="tensor")
    train(dbg, "mlp", 1)
    dbg.close()
    rank = rank_dirs(str(tmp_path / "t" / "dump"))[0]
    r = load_rank(rank)
    item = r["dump"]["data"]["Module.fc1.Linear.forward.0"]["input_args"][0]
    assert item["data_name"] == "Module.fc1.Linear.forward.0.input.0.pt"
    assert r["dump"]["dump_data_dir"] == os.path.join(rank, "dump_tensor_data")
    saved = torch.load(os.path.join(rank, "dump_tensor_data", item["data_name"]))
    assert saved.shape == (4, 8) and saved.max().item() == item["Max"]
    files = set(os.listdir(os.path.join(rank, "dump_tensor_data")))
    assert "Module.fc1.Linear.forward.0.parameters.weight.pt" in files
    assert "Module.fc1.Linear.parameters_grad.0.weight.pt" in files   # the record's name, then the parameter's

    (tmp_path / "s").mkdir()
    dbg = make_debugger(tmp_path / "s", level="mix", task="structure")
    train(dbg, "mlp", 1)
    dbg.close()
    r = dump_of(tmp_path / "s")
    # names only, as the reference writes a structure dump: with records in dump.json, msprobe's graph_visualize
    # takes the dump for one to compare statistics of, refuses the mode and hangs
    assert r["dump"]["data"] == {} and r["dump"]["task"] == "structure"
    assert r["construct"]["Functional.linear.0.forward"] == "Module.fc1.Linear.forward.0"
    assert "Module.fc1.Linear.forward.0" in {n for names, _ in r["stack"].values() for n in names}


def test_saved_tensor_files_stay_in_the_dump_whatever_the_names(tmp_path):
    """A saved tensor's file is named from its record: user text. A save() name with "../" once wrote outside
    the dump, and a ModuleDict key such as "enc/0" made a path into a folder that is not there, which stopped the
    writer for the rest of the run. Separators become "_", and an overlong name is cut (with a hash)."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "d" / "dump"), task="tensor", level="debug", step=[0])
    dbg.save(torch.arange(3.0), "../../../escape")
    dbg.save(torch.ones(2), "x" * 400)
    dbg.step()
    model = torch.nn.ModuleDict({"enc/0": torch.nn.Linear(2, 2)})
    l0 = make_debugger(tmp_path, level="L0", task="tensor", steps=1)
    l0.start(model=model)
    model["enc/0"](torch.randn(1, 2)).sum().backward()
    l0.stop()
    l0.step()
    for d in (dbg, l0):
        d.close()
        assert d.hook_errors == 0
    assert sorted(os.listdir(tmp_path)) == ["config.json", "d", "dump", "dump_tb"]   # nothing beside the dumps
    debug_dir = rank_dirs(str(tmp_path / "d" / "dump"))[0]
    with open(os.path.join(debug_dir, "debug.json")) as f:
        debug = json.load(f)
    for doc, rank_dir in ((debug, debug_dir), (dump_of(tmp_path)["dump"], rank_dirs(str(tmp_path / "dump"))[0])):
        names = [v["data_name"] for v in _items(doc["data"]) if "data_name" in v]
        assert names and all("/" not in n and len(n) < 255 for n in names)
        files = os.listdir(os.path.join(rank_dir, "dump_tensor_data"))
        assert sorted(files) == sorted(set(names))
        for n in names:
            torch.load(os.path.join(rank_dir, "dump_tensor_data", n))
    assert sorted(os.listdir(tmp_path / "d")) == ["dump", "dump_tb"]
    assert debug["data"]["../../../escape.0.debug"]["data_name"] == ".._.._.._escape.0.debug.pt"


def _items(value):
    if isinstance(value, dict):
        if "data_name" in value:
            yield value
        for v in value.values():
            yield from _items(v)
    elif isinstance(value, list):
        for v in value:
            yield from _items(v)


def _local_subclass_model():
    class Tagged(torch.Tensor):   # defined in a function: pickle cannot find it by name
        pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x.as_subclass(Tagged)).relu()

    return M()


def _collect(dbg, model, shape, steps):
    """`steps` collected steps of a forward and backward of `model` on random inputs of `shape`; closes `dbg`."""
    for _ in range(steps):
        dbg.start(model=model)
        model(torch.randn(*shape)).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()


def _tensor_files(tmp_path, step=0):
    rd = rank_dirs(str(tmp_path / "dump"), step)[0]
    data = json.load(open(os.path.join(rd, "dump.json")))["data"]
    named = set()

    def walk(v):
        if isinstance(v, dict):
            if isinstance(v.get("data_name"), str):
                named.add(v["data_name"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(data)
    return named, set(os.listdir(os.path.join(rd, "dump_tensor_data")))


def test_a_tensor_subclass_is_saved_as_a_plain_tensor(tmp_path):
    """A subclass defined in a function cannot be pickled: its file stopped the writer, and every later step was
    lost. Its file now holds a plain tensor (loadable without the user's class)."""
    torch.manual_seed(0)
    model = _local_subclass_model()
    dbg = make_debugger(tmp_path, level="mix", task="tensor", steps=2)
    _collect(dbg, model, (2, 4), 2)
    assert dbg.hook_errors == 0
    for step in (0, 1):
        named, files = _tensor_files(tmp_path, step)
        assert named == files and len(files) > 10
    rd = rank_dirs(str(tmp_path / "dump"), 1)[0]
    loaded = torch.load(os.path.join(rd, "dump_tensor_data", "Module.fc.Linear.forward.0.input.0.pt"))
    assert type(loaded) is torch.Tensor and loaded.shape == (2, 4)


def test_a_tensor_file_that_cannot_be_written_loses_that_file_alone(tmp_path, monkeypatch):
    """One file's error (not the disk's) costs that file: the step's other files and its dump.json are written,
    the item names no file, and the error is counted."""
    import tbprobe.collector.pytorch.debugger as debugger_mod

    real = debugger_mod.save_tensor

    def flaky(path, t):
        if os.path.basename(path).startswith("Module.0.Linear.forward.0.input"):
            raise ValueError("cannot pickle this one")
        real(path, t)

    monkeypatch.setattr(debugger_mod, "save_tensor", flaky)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    dbg = make_debugger(tmp_path, level="L0", task="tensor", steps=2)
    _collect(dbg, model, (2, 4), 2)
    assert dbg.hook_errors == 2
    for step in (0, 1):
        named, files = _tensor_files(tmp_path, step)
        assert named == files and "Module.0.Linear.forward.0.output.0.pt" in files
        data = dump_of(tmp_path, step)["dump"]["data"]
        assert "data_name" not in data["Module.0.Linear.forward.0"]["input_args"][0]


@pytest.mark.parametrize("data_mode", [["input"], ["forward", "output"], ["backward", "input"]])
def test_data_mode_writes_the_files_of_the_side_it_keeps_only(tmp_path, data_mode):
    # the items of the side left out were made, and their files written, before the record dropped them
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    dbg = make_debugger(tmp_path, level="mix", task="tensor", steps=1, data_mode=data_mode)
    _collect(dbg, model, (3, 4), 1)
    named, files = _tensor_files(tmp_path)
    assert named == files and files


@pytest.mark.parametrize("summary_mode", ["md5", "xor"])
def test_task_tensor_takes_the_summary_mode(tmp_path, summary_mode):
    # the key was ignored for task tensor; the reference adds the CRC beside the statistics (md5), or writes the
    # xor checksum alone (xor), and saves the files either way
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    cfg = {"task": "tensor", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [0], "level": "L0",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(tmp_path / "config.json"))
    dbg.start(model=model)
    x = torch.randn(3, 4)
    model(x)
    dbg.stop()
    dbg.step()
    dbg.close()
    item = dump_of(tmp_path)["dump"]["data"]["Module.0.Linear.forward.0"]["input_args"][0]
    assert item["data_name"] == "Module.0.Linear.forward.0.input.0.pt"
    if summary_mode == "md5":
        assert item["md5"] == "%08x" % zlib.crc32(x.numpy().tobytes()) and item["Max"] == x.max().item()
        assert list(item).index("data_name") < list(item).index("md5")
    else:
        assert item["md5"].startswith("0x") and "Max" not in item
    named, files = _tensor_files(tmp_path)
    assert named == files
