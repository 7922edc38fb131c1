"""The filters of what a collected step keeps, on real CPU training: the step and rank filters (a step past the
last one switches the collector off for good; the launcher's rank before torch.distributed), scope (a range of
forward or of backward calls, without the module around its first call) and list (names; a listed backward record
keeps its parameter gradients), data_mode (a side of each record, parameter gradients counted as backward), the
risk levels (which never narrow a scope or a list), tensor_list (which tensors of task statistics get a file) and
extra_info off."""
import glob
import json
import os

import pytest
import torch
from conftest import dump_of, load_rank, make_debugger, rank_dirs
from run_model import train

from tbprobe import PrecisionDebugger


def test_step_filter_switches_off_for_good_and_restores_torch(tmp_path):
    dbg = make_debugger(tmp_path, level="mix", steps=1)   # step [0] only
    original_add = torch.Tensor.__add__
    model, _ = train(dbg, "mlp", 3)
    assert sorted(os.listdir(tmp_path / "dump")) == ["step0"]
    assert dbg._finished and torch.Tensor.__add__ is original_add
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_scope_list_and_data_mode(tmp_path):
    # two steps each: the scope is a range in each step's call order, the list a test of the name alone (whose
    # answer the collector keeps across steps); both must select the same records in every step
    (tmp_path / "a").mkdir()
    dbg = make_debugger(tmp_path / "a", level="mix", steps=2,
                        scope=["Module.fc1.Linear.forward.0", "Module.act.ReLU.forward.0"])
    train(dbg, "mlp", 2)
    dbg.close()
    data = dump_of(tmp_path / "a")["dump"]["data"]
    assert "Module.fc1.Linear.forward.0" in data and "Module.act.ReLU.forward.0" in data
    assert "Functional.linear.0.forward" in data and "Module.fc2.Linear.forward.0" not in data
    # a range of forward calls: the backward pass runs after it closed (as the reference selects)
    assert not any(".backward" in n or "parameters_grad" in n for n in data)
    assert list(dump_of(tmp_path / "a", step=1)["dump"]["data"]) == list(data)

    # a range of backward calls, from fc2's backward to fc1's: what the backward pass records in between, as
    # msprobe 26.2.0 selects it. fc1's input needs no gradient, so its backward ends as soon as it begins, before
    # the linear's; its parameter gradients go with its backward record
    (tmp_path / "c").mkdir()
    dbg = make_debugger(tmp_path / "c", level="mix", steps=2,
                        scope=["Module.fc2.Linear.backward.0", "Module.fc1.Linear.backward.0"])
    train(dbg, "mlp", 2)
    dbg.close()
    for step in (0, 1):
        data = dump_of(tmp_path / "c", step)["dump"]["data"]
        assert set(data) == {"Functional.linear.1.backward", "Module.fc2.Linear.parameters_grad.0",
                             "Module.fc2.Linear.backward.0", "Functional.relu.0.backward", "Module.act.ReLU.backward.0",
                             "Module.fc1.Linear.backward.0", "Module.fc1.Linear.parameters_grad.0"}

    (tmp_path / "b").mkdir()
    dbg = make_debugger(tmp_path / "b", level="L1", steps=2, list=["relu"], data_mode=["forward"])
    train(dbg, "mlp", 2)
    dbg.close()
    for step in (0, 1):
        assert list(dump_of(tmp_path / "b", step)["dump"]["data"]) == ["Functional.relu.0.forward"]


@pytest.mark.parametrize("mode, grads", [("forward", False), ("backward", True)])
def test_data_mode_counts_parameter_gradients_as_backward(tmp_path, mode, grads):
    # as msprobe 26.2.0 does: data_mode ["backward"] keeps Module.fc1.Linear.parameters_grad.0, ["forward"] not
    dbg = make_debugger(tmp_path, level="L0", data_mode=[mode])
    train(dbg, "mlp", 1)
    dbg.close()
    names = list(dump_of(tmp_path)["dump"]["data"])
    assert any(n.endswith(f".{mode}.0") for n in names)
    assert ("Module.fc1.Linear.parameters_grad.0" in names) is grads
    assert ("Module.fc2.Linear.parameters_grad.0" in names) is grads


def test_risk_levels(tmp_path):
    def names(risk):
        d = tmp_path / risk
        d.mkdir()
        dbg = make_debugger(d, level="L1", risk_level=risk)
        train(dbg, "gpt", 1)
        dbg.close()
        r = dump_of(d)
        return set(r["dump"]["data"])

    focus, core, every = names("FOCUS"), names("CORE"), names("ALL")
    assert "Tensor.transpose.0.forward" in every and "Tensor.transpose.0.forward" not in focus
    assert "Functional.gelu.0.forward" in focus and "Functional.gelu.0.forward" not in core
    assert "Functional.linear.0.forward" in core and "Functional.scaled_dot_product_attention.0.forward" in core
    assert core < focus < every


def test_a_scope_or_list_is_not_narrowed_by_the_risk_level(tmp_path):
    """As msprobe: scope and list select by name alone. With CORE beside them tbprobe recorded nothing of a scope
    whose first call is not CORE (its range never opened), and left out every listed call that is not CORE."""
    def names(tag, **block):
        d = tmp_path / tag
        d.mkdir()
        dbg = make_debugger(d, level="L1", **block)
        train(dbg, "gpt", 1)
        dbg.close()
        return set(dump_of(d)["dump"]["data"])

    scope = ["Functional.gelu.0.forward", "Functional.gelu.1.forward"]
    in_scope = names("scope", scope=scope)
    assert "Functional.gelu.0.forward" in in_scope and len(in_scope) > 2
    assert names("scope_core", scope=scope, risk_level="CORE") == in_scope
    listed = names("list", list=["gelu", "linear"])
    assert any(n.startswith("Functional.gelu.") for n in listed)
    assert names("list_core", list=["gelu", "linear"], risk_level="CORE") == listed


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_listed_backward_record_keeps_its_parameter_gradients(tmp_path, level):
    """A module's parameters_grad goes with its backward record, kept by a list as by a scope (msprobe keeps the
    first layer's, whose backward record comes first; tbprobe dropped them)."""
    listed = ["Module.layers.1.mlp.down_proj.Linear.backward.0", "Module.embed_tokens.Embedding.backward.0"]
    dbg = make_debugger(tmp_path, level=level, list=listed)
    train(dbg, "llama", 1)
    dbg.close()
    modules = {n for n in dump_of(tmp_path)["dump"]["data"] if n.startswith("Module.")}
    assert modules == set(listed) | {"Module.layers.1.mlp.down_proj.Linear.parameters_grad.0",
                                     "Module.embed_tokens.Embedding.parameters_grad.0"}


@pytest.mark.parametrize("ranks, env, dumped", [([1], None, False), ([0], None, True), ([1], "1", True),
                                                 ([0, 2], "1", False), ([], None, True)])
def test_the_rank_filter_before_torch_distributed_tells_the_rank(tmp_path, monkeypatch, ranks, env, dumped):
    """Without torch.distributed the rank is the launcher's (RANK, as torchrun sets it before the process group
    exists), or 0 for a process alone; before, such a process passed every rank filter."""
    if env is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", env)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
                               "step": [0], "rank": ranks}))
    dbg = PrecisionDebugger(config_path=str(cfg))
    dbg.start()
    torch.ones(2).add(1)
    dbg.stop()
    dbg.step()
    dbg.close()
    steps = glob.glob(str(tmp_path / "dump" / "step*" / "*" / "dump.json"))
    assert bool(steps) == dumped


def test_tensor_list_saves_only_matching_tensors(tmp_path):
    dbg = make_debugger(tmp_path, level="L1", tensor_list=["relu"])
    train(dbg, "mlp", 1)
    dbg.close()
    rank = rank_dirs(str(tmp_path / "dump"))[0]
    files = set(os.listdir(os.path.join(rank, "dump_tensor_data")))
    assert files and all("relu" in f for f in files)
    data = load_rank(rank)["dump"]["data"]
    assert data["Functional.relu.0.forward"]["output"][0]["data_name"] == "Functional.relu.0.forward.output.0.pt"
    assert "data_name" not in data["Functional.linear.0.forward"]["output"][0]


def test_data_mode_input_and_extra_info_off(tmp_path):
    (tmp_path / "a").mkdir()
    dbg = make_debugger(tmp_path / "a", level="mix", data_mode=["input"])
    train(dbg, "mlp", 1)
    dbg.close()
    data = dump_of(tmp_path / "a")["dump"]["data"]
    # the other side's keys left out, a module's parameters with its outputs, as the reference writes them
    fw = data["Functional.linear.0.forward"]
    assert list(fw) == ["input_args", "input_kwargs"] and fw["input_args"]
    assert list(data["Module.fc1.Linear.forward.0"]) == ["input_args", "input_kwargs"]
    bw = data["Module.fc2.Linear.backward.0"]
    assert list(bw) == ["input"] and bw["input"]

    from run_model import config

    cfg = config(str(tmp_path / "b" / "dump"), "mix")
    cfg["extra_info"] = False
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "c.json").write_text(json.dumps(cfg))
    dbg = PrecisionDebugger(config_path=str(tmp_path / "b" / "c.json"))
    train(dbg, "mlp", 1)
    dbg.close()
    # no stack.json nor construct.json, as msprobe writes none (they were empty files)
    (rank,) = rank_dirs(str(tmp_path / "b" / "dump"))
    assert not {"stack.json", "construct.json"} & set(os.listdir(rank))
    with open(os.path.join(rank, "dump.json")) as f:
        assert "Module.fc1.Linear.forward.0" in json.load(f)["data"]
    from tbprobe.cli import main  # (tbprobe graph builds such a dump)

    assert main(["graph", "-tp", str(tmp_path / "b" / "dump"), "-o", str(tmp_path / "g"), "-q"]) == 0
    assert len(list((tmp_path / "g").glob("build_*.vis.db"))) == 1


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_backward_range_leaves_out_the_module_around_its_first_call(tmp_path, task):
    """A backward range from enc.1 to enc.0, enc.1 being the last module of a Sequential whose input needs no
    gradient: the Sequential's backward, which runs around the range (its record complete as its output's gradient
    comes, before enc.1's begins), was kept: its hook ran after enc.1's on their one autograd node. msprobe's
    dump of this script has the range alone."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
            self.out = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.out(self.enc(x))

    dbg = make_debugger(tmp_path, level="L0", task=task,
                        scope=["Module.enc.1.Linear.backward.0", "Module.enc.0.Linear.backward.0"])
    model = Net()
    dbg.start(model=model)
    model(torch.randn(2, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert list(data) == [
        "Module.enc.1.Linear.parameters_grad.0", "Module.enc.1.Linear.backward.0", "Module.enc.0.Linear.backward.0",
        "Module.enc.0.Linear.parameters_grad.0"]
    if task == "tensor":   # (and no tensor file of a record the range leaves out)
        files = [os.path.basename(f) for f in glob.glob(str(tmp_path / "dump" / "**" / "*.pt"), recursive=True)]
        assert files and all(any(f.startswith(name + ".") for name in data) for f in files), files
