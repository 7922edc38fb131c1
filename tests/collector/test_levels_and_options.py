"""Levels, filters, tasks and the loop conveniences, on real CPU training."""
import glob
import json
import logging
import math
import os
import zlib
from typing import Optional

import pytest
import torch
from conftest import load_rank, make_debugger, rank_dirs
from run_model import build, train

from tbprobe import PrecisionDebugger
from tbprobe.errors import TbprobeError


def dump_of(tmp_path, step=0):
    return load_rank(rank_dirs(str(tmp_path / "dump"), step)[0])


def test_l1_writes_empty_construct_and_operator_names(tmp_path):
    dbg = make_debugger(tmp_path, level="L1")
    train(dbg, "mlp", 1)
    dbg.close()
    r = dump_of(tmp_path)
    assert r["construct"] == {}
    names = list(r["dump"]["data"])
    assert names[:2] == ["Functional.linear.0.forward", "Functional.relu.0.forward"]
    assert "Functional.linear.0.backward" in names and "Functional.mse_loss.0.backward" in names
    assert not any(n.startswith("Module.") for n in names)


def test_operator_counters_dunders_and_inplace_input_before_mutation(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.ones(3, requires_grad=True)
    dbg.start()
    y = x + 1                  # Tensor.__add__
    z = y.add(1)               # Tensor.add
    w = torch.matmul(z, z)     # Torch.matmul
    h = z * 1.0
    h.mul_(3.0)                # in-place: input recorded as it was before
    (w + h.sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    for name in ("Tensor.__add__.0.forward", "Tensor.add.0.forward", "Torch.matmul.0.forward",
                 "Tensor.__mul__.0.forward", "Tensor.mul_.0.forward", "Tensor.__add__.1.forward",
                 "Torch.matmul.0.backward", "Tensor.mul_.0.backward"):
        assert name in data, name
    mul = data["Tensor.mul_.0.forward"]
    assert mul["input_args"][0]["Max"] == 3.0 and mul["output"][0]["Max"] == 9.0
    assert data["Torch.matmul.0.forward"]["output"][0]["Max"] == 27.0
    assert "Tensor.sum.0.forward" in data and "Tensor.backward.0.forward" not in data


def test_a_call_returning_its_input_has_the_producers_backward_but_dropout_p0_has_none(tmp_path):
    # as the reference records them: x.float() of a float32 x returns x, and its backward is the node that made x
    # (here the matmul's); dropout with p=0 returns its input too, and has no backward record at all
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
                               "step": [0], "risk_level": "ALL"}))
    dbg = PrecisionDebugger(config_path=str(cfg))
    a = torch.ones(2, 2, requires_grad=True)
    dbg.start()
    y = torch.matmul(a, a)
    z = torch.nn.functional.dropout(y.float(), p=0.0)
    (z * 2).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert "Functional.dropout.0.forward" in data and "Functional.dropout.0.backward" not in data
    assert data["Tensor.float.0.backward"] == data["Torch.matmul.0.backward"]
    assert data["Tensor.float.0.backward"]["input"][0]["Max"] == 2.0   # d(2z)/dz reaching the matmul's node


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


def test_a_module_that_did_not_run_reports_no_gradient_of_the_parameters_it_shares(tmp_path):
    """T5's `shared` embedding is tied to its encoder's: only the module that ran reports the gradient (as msprobe
    26.2.0 does), once per step."""
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = torch.nn.Embedding(10, 4)
            self.embed = torch.nn.Embedding(10, 4)
            self.embed.weight = self.shared.weight
            self.out = torch.nn.Linear(4, 2)

        def forward(self, ids):
            return self.out(self.embed(ids))

    model = Tied()
    dbg = make_debugger(tmp_path, level="L0", steps=2)
    for _ in range(2):
        dbg.start(model=model)
        model(torch.tensor([[1, 2, 3]])).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    for step in (0, 1):
        names = list(dump_of(tmp_path, step)["dump"]["data"])
        grads = sorted(n for n in names if ".parameters_grad." in n)
        assert grads == ["Module.embed.Embedding.parameters_grad.0", "Module.out.Linear.parameters_grad.0"], step


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


def test_loop_conveniences_and_init_step(tmp_path):
    model, data, loss_fn = build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[5, 6, 7], model=model)
    dbg.set_init_step(5)

    @dbg.step_fn
    def train_step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    train_step(*data[0])
    with dbg.collect(model):
        loss_fn(model(data[1][0]), data[1][1]).backward()
    with dbg.capture(model.fc2):             # scoped: only fc2 (and its children) inside step 7
        loss_fn(model(data[2][0]), data[2][1]).backward()
    dbg.step()
    dbg.close()
    assert sorted(d for d in os.listdir(tmp_path / "dump") if d.startswith("step")) == ["step5", "step6", "step7"]
    step7 = set(load_rank(rank_dirs(str(tmp_path / "dump"), 7)[0])["dump"]["data"])
    assert step7 and all("fc2" in n for n in step7)


def test_step_fn_on_generator_and_coroutine_functions_collects_their_bodies(tmp_path):
    """step_fn started, stopped and ended the step when a generator or coroutine function was called, before its
    body ran: an empty step, without a word. An async generator is refused at decoration."""
    import asyncio

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0, 1], model=model)

    @dbg.step_fn
    def micro_batches(n):
        for _ in range(n):
            loss = model(torch.randn(4, 2)).sum()
            loss.backward()
            yield loss.item()
        return "done"

    @dbg.step_fn
    async def step():
        await asyncio.sleep(0)
        model(torch.randn(4, 2)).sum().backward()
        return 7

    gen = micro_batches(2)
    assert dbg.current_step == 0            # (nothing ran yet)
    assert len(list(gen)) == 2 and dbg.current_step == 1
    assert asyncio.run(step()) == 7 and dbg.current_step == 2
    with pytest.raises(TbprobeError, match="async generator"):
        @dbg.step_fn
        async def stream():
            yield 1
    dbg.close()
    assert dbg.hook_errors == 0
    first = load_rank(rank_dirs(str(tmp_path / "dump"), 0)[0])["dump"]["data"]
    second = load_rank(rank_dirs(str(tmp_path / "dump"), 1)[0])["dump"]["data"]
    assert {"Module.0.Linear.forward.1", "Module.0.Linear.backward.1", "Module.1.ReLU.forward.1"} <= set(first)
    assert {"Module.0.Linear.forward.0", "Module.0.Linear.backward.0"} <= set(second)
    assert "Module.0.Linear.forward.1" not in second


def test_capture_inside_a_collected_step_narrows_only_its_block(tmp_path):
    """capture() inside a collect() block stopped collection when it ended: the rest of the step (the forwards
    after it, every backward, every parameters_grad) went unrecorded without a word. A module outside the model
    was never hooked, and its block recorded nothing: that is now a clear error."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    with dbg.collect(model):
        x = torch.randn(4, 2)
        h = model[0](x)
        with dbg.capture(model[2]):
            model[0](x)                      # outside the captured module: not recorded
            model[2](torch.relu(h))
        loss = model(x).sum()                # after the block: recorded as before
        loss.backward()
        with pytest.raises(TbprobeError, match="not part of the model"):
            with dbg.capture(torch.nn.Linear(2, 2)):
                pass
        with pytest.raises(TbprobeError, match="takes a torch.nn.Module"):
            with dbg.capture("fc"):
                pass
    dbg.close()
    assert dbg.hook_errors == 0
    data = load_rank(rank_dirs(str(tmp_path / "dump"))[0])["dump"]["data"]
    forwards = sorted(k for k in data if ".forward." in k)
    assert forwards == ["Module.0.Linear.forward.0", "Module.0.Linear.forward.1", "Module.1.ReLU.forward.0",
                        "Module.2.Linear.forward.0", "Module.2.Linear.forward.1"]
    assert {"Module.0.Linear.backward.1", "Module.2.Linear.backward.1", "Module.0.Linear.parameters_grad.0",
            "Module.2.Linear.parameters_grad.0"} <= set(data)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_modules_outside_a_capture_have_no_parameter_gradients_when_the_backward_runs_after_it(tmp_path, level):
    """The backward of a forward captured in a block runs after the block, the scope gone: the parameters_grad of
    every module the forward ran outside the captured one was recorded, with none of their other records."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    with dbg.capture(model[1]):
        out = model(torch.randn(5, 4))
    out.sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    names = [k for k in load_rank(rank_dirs(str(tmp_path / "dump"))[0])["dump"]["data"] if k.startswith("Module")]
    assert names == ["Module.1.ReLU.forward.0", "Module.1.ReLU.backward.0"]


def test_a_model_sharing_modules_with_one_given_before_replaces_its_hooks(tmp_path, caplog):
    """start(model=m[2]) on one step and start(model=m) on a later one (or capture(m[2]) before any model was
    known, which takes m[2] for the model) left both models' hooks on: m[2]'s modules were recorded twice, under
    both models' names, the stale ones clashing with m's own (Module.0.Linear). A leaf captured with no model known
    recorded nothing (the model's root is not recorded): an error now."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(),
                            torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh()), torch.nn.Linear(6, 2))
    dbg = make_debugger(tmp_path, level="L0", steps=3)
    with pytest.raises(TbprobeError, match="no model is known yet"):
        with dbg.capture(m[0]):
            pass
    for model in (m[2], m, m[2]):
        with dbg.collect(model):
            m(torch.randn(5, 4)).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    assert "shares modules with one given before" in caplog.text
    forwards = [sorted(k for k in dump_of(tmp_path, step)["dump"]["data"] if ".forward." in k) for step in range(3)]
    sub = ["Module.0.Linear.forward.0", "Module.1.Tanh.forward.0"]
    assert forwards[0] == sub and forwards[2] == sub
    assert forwards[1] == ["Module.0.Linear.forward.0", "Module.1.ReLU.forward.0", "Module.2.0.Linear.forward.0",
                           "Module.2.1.Tanh.forward.0", "Module.2.Sequential.forward.0", "Module.3.Linear.forward.0"]
    # the stale names held the other model's Linear: each name is one module's, with its own shape
    assert dump_of(tmp_path, 1)["dump"]["data"]["Module.0.Linear.forward.0"]["parameters"]["weight"]["shape"] == [6, 4]


def test_a_step_block_inside_another_is_part_of_the_outer_step(tmp_path):
    """collect() inside a step_fn (or inside another collect()) once ended the outer step halfway: what came
    after the inner block was not recorded and the step counter jumped by two."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0, 1], model=model)

    @dbg.step_fn
    def train_step():
        with dbg.collect(model):
            model(torch.randn(1, 2))
        model(torch.randn(1, 2))

    train_step()
    assert dbg.current_step == 1
    with dbg.collect(model):
        with dbg.collect(model):
            model(torch.randn(1, 2))
        model(torch.randn(1, 2))
    dbg.close()
    for step in (0, 1):
        data = load_rank(rank_dirs(str(tmp_path / "dump"), step)[0])["dump"]["data"]
        assert [n for n in data if n.startswith("Module.0.")] == ["Module.0.Linear.forward.0", "Module.0.Linear.forward.1"]


def test_a_step_block_whose_start_fails_leaves_the_next_one_working(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    with pytest.raises(TbprobeError, match="start"):
        with dbg.collect("not a model"):
            pass
    with dbg.collect(model):
        model(torch.randn(1, 2))
    dbg.close()
    data = load_rank(rank_dirs(str(tmp_path / "dump"), 0)[0])["dump"]["data"]
    assert "Module.0.Linear.forward.0" in data


@pytest.mark.parametrize("bad", [True, -1, 1.0, "3"])
def test_set_init_step_refuses_what_is_not_a_step(tmp_path, bad):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    with pytest.raises(TbprobeError, match="set_init_step"):   # (True made a folder named stepTrue)
        dbg.set_init_step(bad)
    dbg.close()


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


def _debug_json(tmp_path, step=0):
    (rank,) = rank_dirs(str(tmp_path / "dump"), step)
    assert sorted(os.listdir(rank)) == ["debug.json"]      # the reference's level debug: debug.json alone
    with open(os.path.join(rank, "debug.json")) as f:
        return json.load(f)


def test_debug_level_save(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0, 1])
    t = torch.arange(4.0)
    dbg.save(t, "activations")
    dbg.save({"w": t * 2}, "activations", save_backward=False)
    dbg.step()
    dbg.save(t, "activations")
    dbg.step()
    dbg.close()
    doc = _debug_json(tmp_path)
    assert {k: doc[k] for k in ("task", "level", "framework")} == {"task": "statistics", "level": "debug",
                                                                   "framework": "pytorch"}
    data = doc["data"]
    assert list(data) == ["activations.0.debug", "activations_grad.0.debug", "activations.1.debug"]
    assert data["activations.0.debug"]["Max"] == 3.0
    assert data["activations_grad.0.debug"] is None           # t does not require grad
    assert data["activations.1.debug"]["w"]["Max"] == 6.0
    assert list(_debug_json(tmp_path, 1)["data"]) == ["activations.0.debug", "activations_grad.0.debug"]


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


def test_debug_level_save_backward(tmp_path):
    """`<name>_grad.<n>.debug` mirrors the saved value with null leaves; backward fills each leaf whose tensor
    gets a gradient, and the hooks go when the step ends."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0, 1])
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for _ in range(2):
        h = w * 2
        dbg.save({"h": h, "k": 3, "plain": torch.ones(2), "l": [h * 3, 7]}, "mixed")
        dbg.save(w, "leaf")
        (h ** 2).sum().backward()        # d/dw sum((2w)^2) = 8w
        dbg.save(h, "late")              # after the backward: no gradient comes
        dbg.step()
        w.grad = None
    dbg.close()
    assert dbg.hook_errors == 0
    assert not w._backward_hooks                     # each step's hooks went with it
    data = _debug_json(tmp_path, 1)["data"]
    grad = data["mixed_grad.0.debug"]
    assert grad["h"]["Max"] == 12.0 and grad["h"]["Min"] == -8.0      # dL/dh = 2h
    assert grad["h"]["requires_grad"] is False
    assert (grad["k"], grad["plain"], grad["l"]) == (None, None, [None, None])
    assert data["leaf_grad.0.debug"]["Max"] == 24.0 and data["leaf_grad.0.debug"]["Min"] == -16.0
    assert data["late_grad.0.debug"] is None


def test_debug_level_save_with_bad_arguments_skips_them_with_one_warning(tmp_path, caplog):
    """save(x, 3) raised a TbprobeError into the training loop; msprobe warns and skips a non-str name and a
    non-bool save_backward. Now both are skipped, with one warning per kind, and the good calls are saved."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0])
    x = torch.ones(2)
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        for _ in range(2):
            dbg.save(x, 3)
            dbg.save(x, "x", save_backward="yes")
        dbg.save(x, "kept")
    dbg.step()
    dbg.close()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and "name must be a str" in warned[0] and "save_backward" in warned[1]
    assert sorted(_debug_json(tmp_path, 0)["data"]) == ["kept.0.debug", "kept_grad.0.debug"]


def test_debug_level_save_backward_of_a_namedtuple_and_a_dataclass(tmp_path):
    """Their forward entries are dicts of their fields, as msprobe writes them; the gradient entry was a list (a
    namedtuple) or null with no gradient ever recorded (a dataclass)."""
    import collections
    import dataclasses

    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Out:
        a: torch.Tensor
        b: int

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0])
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = w * 2
    dbg.save(Pair(h, 3), "nt")
    dbg.save(Out(h, 4), "dc")
    (h ** 2).sum().backward()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = _debug_json(tmp_path, 0)["data"]
    for name in ("nt", "dc"):
        assert sorted(data[f"{name}.0.debug"]) == ["a", "b"]
        grad = data[f"{name}_grad.0.debug"]
        assert sorted(grad) == ["a", "b"] and grad["b"] is None
        assert grad["a"]["Max"] == 12.0 and grad["a"]["Min"] == -8.0


def test_dataflow_side_file_and_health_events(tmp_path):
    dbg = make_debugger(tmp_path, level="L1", steps=2)
    train(dbg, "mlp", 2)
    dbg.close()
    rank = rank_dirs(str(tmp_path / "dump"))[0]
    with open(os.path.join(rank, "dataflow.json")) as f:
        flow = json.load(f)
    assert flow["Functional.relu.0.forward"] == {"0": "Functional.linear.0.forward"}
    assert flow["Functional.linear.1.forward"]["0"] == "Functional.relu.0.forward"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events_dir,) = glob.glob(str(tmp_path / "dump_tb" / "events" / "*"))
    acc = EventAccumulator(events_dir)
    acc.Reload()
    assert {"tbprobe/records", "tbprobe/nonfinite_tensors", "tbprobe/max_abs"} <= set(acc.Tags()["scalars"])
    records = acc.Scalars("tbprobe/records")
    assert [e.step for e in records] == [0, 1] and records[0].value == len(load_rank(rank)["dump"]["data"])


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_gradients_unscaled_by_grad_scaler_are_summarised_as_they_are_then(tmp_path):
    """On CPU GradScaler's unscaling changes the gradients in place without bumping their version: at mix the
    clipping's and the optimizer's records reused the parameters_grad items, 65536 times too large (the
    reference reads them as they are)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    scaler = torch.amp.GradScaler("cpu")
    dbg = make_debugger(tmp_path, level="mix")
    dbg.start(model=model)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(torch.randn(4, 8)).float(), torch.randn(4, 4))
    scaler.scale(loss).backward()
    scaled = model[0].weight.grad.clone()
    scaler.unscale_(opt)
    unscaled = model[0].weight.grad.clone()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0 and not torch.equal(scaled, unscaled)
    data = dump_of(tmp_path)["dump"]["data"]
    assert data["Module.0.Linear.parameters_grad.0"]["weight"][0]["Max"] == scaled.max().item()
    norm_in = data["Torch._foreach_norm.0.forward"]["input_args"][0][0]
    assert (norm_in["Max"], norm_in["Min"]) == (unscaled.max().item(), unscaled.min().item())


def test_an_operator_with_one_node_per_output_gets_its_first_output_s_backward(tmp_path):
    """tensor_split (and MultiheadAttention's output and weights) gives each output a node of its own: the
    backward record joined every node's gradients in the order the engine reached them (input.0 was output 2's
    gradient). As msprobe, it is the first output's node's: its gradient in, its inputs' out (checked against
    msprobe's dump of the same calls)."""
    dbg = make_debugger(tmp_path, level="L1", risk_level="ALL")
    x = torch.arange(6.0, requires_grad=True)
    mha = torch.nn.MultiheadAttention(4, 2)
    q = torch.randn(3, 1, 4)
    dbg.start()
    a, b, c = x.tensor_split(3)
    (a * 5 + b * 7 + c).sum().backward()
    o, w = mha(q, q, q)
    (o.sum() + (w * w).sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    split = data["Tensor.tensor_split.0.backward"]
    assert [i["Max"] for i in split["input"]] == [5.0] and [i["shape"] for i in split["output"]] == [[6]]
    attn = data["Functional.multi_head_attention_forward.0.backward"]
    assert [i["shape"] for i in attn["input"]] == [[3, 1, 4]]


def test_an_operator_whose_first_output_needs_no_gradient_has_no_backward_record(tmp_path):
    """broadcast_tensors of an int index and float logits (what Categorical.log_prob calls) got a backward
    record from its second output's node: the logits' producer's node when no expansion was needed (another call's
    gradients, in its count and places), the expansion's otherwise. msprobe hooks the first output alone, which
    needs no gradient: no record. A call whose first output needs one keeps its record."""
    dbg = make_debugger(tmp_path, level="L1", risk_level="ALL")
    f = torch.randn(4, 4, requires_grad=True)
    col = torch.randn(4, 1, requires_grad=True)
    dbg.start()
    logits = torch.mul(f, 3)
    idx, same = torch.broadcast_tensors(torch.zeros(4, 1, dtype=torch.long), logits)   # no expansion
    _, wide = torch.broadcast_tensors(torch.ones(4, 4), col)                           # an expansion
    kept, _ = torch.broadcast_tensors(col, torch.ones(4, 4))                           # first output needs one
    (same.sum() + wide.sum() + kept.sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert "Torch.broadcast_tensors.0.forward" in data and "Torch.broadcast_tensors.1.forward" in data
    assert "Torch.broadcast_tensors.0.backward" not in data and "Torch.broadcast_tensors.1.backward" not in data
    kept_bw = data["Torch.broadcast_tensors.2.backward"]   # the expansion of col: its gradient in, col's out
    assert [(i["shape"], i["Max"]) for i in kept_bw["input"]] == [([4, 4], 1.0)]
    assert [(i["shape"], i["Max"]) for i in kept_bw["output"]] == [([4, 1], 4.0)]
    assert data["Torch.mul.0.backward"]["input"][0]["Max"] == 1.0


def test_dataflow_links_the_tensors_of_a_list_argument(tmp_path):
    """torch.cat([c, d]) had no dataflow entry: only top-level positional tensors were linked. Its slots are named
    as its items are, `0.0` and `0.1`. (cat is a low-risk call, recorded with data at risk_level ALL.)"""
    dbg = make_debugger(tmp_path, level="L1", risk_level="ALL")
    dbg.start()
    x = torch.randn(2, 3)
    c = torch.exp(x)
    d = torch.add(x, 1)
    torch.cat([c, x, d], dim=1)
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dataflow.json")) as f:
        flow = json.load(f)
    assert flow["Torch.cat.0.forward"] == {"0.0": "Torch.exp.0.forward", "0.2": "Torch.add.0.forward"}


@pytest.mark.parametrize("size", [3, 100_000])     # (the host kernel's items; the batched device path's)
def test_max_abs_counts_finite_values_whose_norm_overflowed(tmp_path, size):
    """The health scalar max_abs left out a tensor whose values were finite but whose float32 Norm (or Mean)
    overflowed: the values growing towards an overflow, which the scalar is there to show."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0, 1])
    for big in (1e10, 1e30):
        dbg.start()
        x = torch.tensor([1.0, -2.0, 0.5]).repeat(size // 3)
        (x * big).mean()
        dbg.stop()
        dbg.step()
    dbg.close()
    (events_dir,) = glob.glob(str(tmp_path / "dump_tb" / "events" / "*"))
    acc = EventAccumulator(events_dir)
    acc.Reload()
    got = [e.value for e in acc.Scalars("tbprobe/max_abs")]
    out = load_rank(rank_dirs(str(tmp_path / "dump"), 1)[0])["dump"]["data"]["Tensor.__mul__.0.forward"]["output"][0]
    assert math.isinf(out["Norm"]) and math.isfinite(out["Min"])
    assert got == [pytest.approx(2e10), pytest.approx(2e30, rel=1e-6)]


def test_nonfinite_values_are_counted(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.tensor([1.0, 0.0, -1.0])
    dbg.start()
    y = torch.log(x)            # -inf and nan
    dbg.stop()
    dbg.step()
    dbg.close()
    out = dump_of(tmp_path)["dump"]["data"]["Torch.log.0.forward"]["output"][0]
    assert out["nan_count"] == 1 and out["inf_count"] == 1 and out["zero_count"] == 1
    assert math.isnan(out["Max"]) and math.isnan(out["Norm"])      # NaN in the file, as the reference writes
    assert y.isnan().sum() == 1


@pytest.mark.parametrize("case", ["scalar", "overflow", "finite"])
def test_nonfinite_numbers_survive_the_fast_encoder(tmp_path, case):
    """A step is written by orjson unless it holds a NaN/Inf anywhere, since orjson would write null: a float
    argument, or a Norm that overflows float32 while Max/Min are finite."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.full((4,), 3e38) if case == "overflow" else torch.tensor([1.0, 2.0])
    dbg.start()
    y = torch.div(x, float("inf") if case == "scalar" else 0.5)     # inf as an argument, a finite output
    dbg.stop()
    dbg.step()
    dbg.close()
    entry = dump_of(tmp_path)["dump"]["data"]["Torch.div.0.forward"]
    assert torch.isfinite(y).all() != (case == "overflow")
    if case == "scalar":
        assert entry["input_args"][1] == {"type": "float", "value": math.inf}
    elif case == "overflow":
        assert entry["input_args"][0]["Max"] == x.max().item() and entry["input_args"][0]["Norm"] == math.inf
    else:
        assert entry["input_args"][1] == {"type": "float", "value": 0.5}
        assert entry["output"][0]["Norm"] == pytest.approx(math.sqrt(20.0))


def test_live_build_graph_per_rank(tmp_path):
    import sqlite3

    dbg = make_debugger(tmp_path, level="mix", steps=2)
    train(dbg, "mlp", 2)
    dbg.close()
    assert dbg.hook_errors == 0, dict(dbg.guard.counts)
    (db,) = glob.glob(str(tmp_path / "dump_tb" / "build_proc*.vis.db"))
    con = sqlite3.connect(db)
    try:
        graphs = sorted(con.execute("SELECT DISTINCT step FROM tb_nodes").fetchall())
        names = {r[0] for r in con.execute("SELECT node_name FROM tb_nodes WHERE step=1")}
        edges = set(con.execute("SELECT src, dst, dst_slot FROM tbprobe_edges WHERE graph_id LIKE 'NPU_1_%'"))
    finally:
        con.close()
    assert graphs in ([(1,)], [(0,), (1,)])          # an older step may be skipped when the writer is behind
    assert {"Module.fc1.Linear.forward.0", "Functional.linear.0.forward", "DefaultModel"} <= names
    # its data flow too, as `tbprobe graph` writes it from the same dump (the live graph had no edges)
    rank = rank_dirs(str(tmp_path / "dump"), 1)[0]
    with open(os.path.join(rank, "dataflow.json")) as f:
        flow = json.load(f)
    assert edges and edges == {(p, c, slot) for c, slots in flow.items() for slot, p in slots.items()}


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


def test_in_place_changes_after_a_hook_do_not_reach_the_recorded_values(tmp_path):
    """Small tensors are copied when their hook ends and reduced later: a module output changed in place by the
    caller, and parameter gradients clipped in place after backward, keep the values their hooks saw."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(lin)
    x = torch.randn(2, 4)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    dbg.start(model=model)
    out = model(x)
    expect_out = out.detach().clone()
    out.mul_(1000.0)                                   # the caller changes the recorded output in place
    out.sum().backward()
    expect_grad = lin.weight.grad.clone()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)   # scales every gradient in place
    assert lin.weight.grad.abs().max() < expect_grad.abs().max()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    fwd = data["Module.0.Linear.forward.0"]["output"][0]
    assert fwd["Max"] == expect_out.max().item() and fwd["Min"] == expect_out.min().item()
    grads = data["Module.0.Linear.parameters_grad.0"]["weight"][0]
    assert grads["Max"] == expect_grad.max().item() and grads["Min"] == expect_grad.min().item()


def test_async_dump_and_precision_keys_take_effect(tmp_path):
    import torch.nn as nn

    for async_dump, precision in ((False, "low"), (True, "high")):
        out = tmp_path / f"a{int(async_dump)}"
        cfg = {"task": "statistics", "dump_path": str(out / "dump"), "level": "L0", "step": [0, 1],
               "async_dump": async_dump, "precision": precision}
        (tmp_path / "c.json").write_text(json.dumps(cfg))
        dbg = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
        assert dbg.session.stats.low_precision is (precision == "low")
        model = nn.Sequential(nn.Linear(3, 2))
        dbg.start(model=model)
        model(torch.randn(4, 3)).sum().backward()
        dbg.stop()
        dbg.step()
        # async: a writer thread; synchronous: step() writes itself, the files complete on return, before close()
        assert (dbg._writer._thread is not None) is async_dump
        if not async_dump:
            assert os.path.exists(rank_dirs(str(out / "dump"), 0)[0] + "/dump.json")
        dbg.close()
        assert os.path.exists(rank_dirs(str(out / "dump"), 0)[0] + "/dump.json")


def test_stack_lines_name_the_calling_source_line(tmp_path):
    """Stacks are keyed by bytecode offsets and turned into lines once; the lines must still be the source lines."""
    import inspect

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.ones(3, requires_grad=True)
    dbg.start()
    here = inspect.currentframe().f_lineno
    y = torch.exp(x); z = torch.exp(y)  # noqa: E702  two calls on one line: one stack entry
    w = torch.sin(z)
    dbg.stop()
    dbg.step()
    dbg.close()
    stacks = dump_of(tmp_path)["stack"]
    by_name = {n: lines for names, lines in stacks.values() for n in names}
    for name, line in (("Torch.exp.0.forward", here + 1), ("Torch.exp.1.forward", here + 1),
                       ("Torch.sin.0.forward", here + 2)):
        top = by_name[name][0]
        assert top.startswith(f"File {__file__}, line {line}, in test_stack_lines_name_the_calling_source_line")
    assert by_name["Torch.exp.0.forward"] is not None
    same = [names for names, _ in stacks.values() if "Torch.exp.0.forward" in names][0]
    assert "Torch.exp.1.forward" in same and w is not None


def test_a_list_of_model_chunks_and_fsdp_wrappers(tmp_path):
    """Each chunk's modules are named Module.<i>.<path>.<Class> (the reference's names; test_peers compares them
    with msprobe's dump), a FullyShardedDataParallel wrapper is not a node of its own (the reference records what
    it wraps), and a model that is neither a module nor a list of them is a clear error at start()."""
    class FullyShardedDataParallel(torch.nn.Module):      # stands for torch's wrapper: only its name counts
        def __init__(self, inner):
            super().__init__()
            self._fsdp_wrapped_module = inner

        def forward(self, x):
            return self._fsdp_wrapped_module(x)

    chunks = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
              torch.nn.Sequential(FullyShardedDataParallel(torch.nn.Linear(4, 2)))]
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    with pytest.raises(TbprobeError, match="a torch.nn.Module or a list or tuple of them.*a list holding str"):
        dbg.start(model=[chunks[0], "not a module"])
    dbg.start(model=tuple(chunks))
    chunks[1](chunks[0](torch.randn(3, 4))).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = load_rank(rank_dirs(str(tmp_path / "dump"))[0])["dump"]["data"]
    assert sorted(n for n in data if ".forward." in n) == [
        "Module.0.0.Linear.forward.0", "Module.0.1.ReLU.forward.0",
        "Module.1.0._fsdp_wrapped_module.Linear.forward.0"]
    assert dbg.hook_errors == 0


def test_gradient_clipping_hangs_under_clip_grad_and_is_put_back(tmp_path):
    original = torch.nn.utils.clip_grad_norm_
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    model, data, loss_fn = build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg.start(model=model)
    loss_fn(model(data[0][0]), data[0][1]).backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert torch.nn.utils.clip_grad_norm_ is original and torch.nn.utils.clip_grad.clip_grad_norm_ is original
    assert float(total) > 0.5   # (the clipping really ran: the norm it returns is the one before clipping)
    construct = dump_of(tmp_path)["construct"]
    assert construct["clip_grad"] is None and construct["optimizer"] is None
    clipping = [k for k, v in construct.items() if v == "clip_grad"]
    assert clipping and all(k.startswith(("Torch.", "Tensor.")) for k in clipping)
    assert "Torch._foreach_norm.0.forward" in clipping
    assert not any(construct[k] == "clip_grad" for k in construct if k.startswith("Module."))
    assert any(v == "optimizer" for v in construct.values())


def test_parameters_grad_is_the_accumulated_gradient_with_micro_batches(tmp_path):
    # as the reference reads it: p.grad after each backward's accumulation, what the optimizer will use
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    model, data, loss_fn = build("mlp")
    dbg.start(model=model)
    loss_fn(model(data[0][0]), data[0][1]).backward()
    first = model.fc1.weight.grad.clone()
    loss_fn(model(data[1][0]), data[1][1]).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    entries = dump_of(tmp_path)["dump"]["data"]
    got0 = entries["Module.fc1.Linear.parameters_grad.0"]["weight"][0]
    got1 = entries["Module.fc1.Linear.parameters_grad.1"]["weight"][0]
    total = model.fc1.weight.grad
    assert not torch.equal(first, total)
    assert got0["Max"] == first.max().item() and got0["Norm"] == pytest.approx(first.norm().item(), rel=1e-6)
    assert got1["Max"] == total.max().item() and got1["Norm"] == pytest.approx(total.norm().item(), rel=1e-6)


class _Gate(torch.nn.Module):
    """`extra` is used only when asked: in the other passes it gets no gradient (an unused parameter, an expert
    no token reached)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))
        self.extra = torch.nn.Parameter(torch.zeros(4))

    def forward(self, x, use_extra=False):
        return x @ self.w + (self.extra if use_extra else 0)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_parameters_grad_of_a_pass_where_some_parameters_get_no_gradient(tmp_path, level):
    """A record for each backward pass, with the gradients that came in it (written when the pass ends), as the
    reference writes one; before, a module with a parameter left out of a pass lost that pass's record, and
    with micro-batches the next pass's gradients took its index."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(_Gate(), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    x, y = torch.randn(5, 4), torch.randn(5, 3)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    grads = []
    for use_extra in (False, True):     # two micro-batches: `extra` is used by the second alone
        torch.nn.functional.mse_loss(model[2](model[1](model[0](x, use_extra))), y).backward()
        grads.append({n: p.grad.clone() for n, p in model[0].named_parameters() if p.grad is not None})
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    names = [k for k in data if k.startswith("Module.0._Gate.parameters_grad.")]
    assert names == ["Module.0._Gate.parameters_grad.0", "Module.0._Gate.parameters_grad.1"]
    for name, want in zip(names, grads):
        got = data[name]
        assert sorted(got) == sorted(want)
        for pname, g in want.items():
            assert got[pname][0]["Max"] == g.max().item()
            assert got[pname][0]["Norm"] == pytest.approx(g.norm().item(), rel=1e-6)
    # the first pass's record is written at its end, before the second pass's records
    order = list(data)
    assert order.index(names[0]) < order.index("Module.2.Linear.backward.1")


def test_in_place_work_on_a_0_dim_tensor_records_its_value_before(tmp_path):
    # a 0-dim tensor's statistics are its value: read when the call is made, not at step end (AdamW's step count
    # `step_t += 1` read 1.0 for its first step)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    zero, count, nan = torch.tensor(0.0), torch.tensor(3), torch.tensor(float("nan"))
    half = torch.tensor(2.0, dtype=torch.float16)
    dbg.start()
    zero += 1
    count += 1
    nan.fill_(1.0)
    half.mul_(2)
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    got = {k: data[k]["input_args"][0] for k in data}
    assert got["Tensor.__iadd__.0.forward"]["Max"] == 0.0 and got["Tensor.__iadd__.0.forward"]["zero_count"] == 1
    assert got["Tensor.__iadd__.1.forward"]["Max"] == 3 and got["Tensor.__iadd__.1.forward"]["zero_count"] == 0
    assert math.isnan(got["Tensor.fill_.0.forward"]["Max"]) and got["Tensor.fill_.0.forward"]["nan_count"] == 1
    assert got["Tensor.mul_.0.forward"]["Max"] == 2.0
    assert data["Tensor.__iadd__.0.forward"]["output"][0]["Max"] == 1.0


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_an_inference_mode_pass_inside_the_step_is_recorded_without_errors(tmp_path, level):
    # inference tensors have no version counter: reading one raised inside the hooks (counted as hook errors)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    model, data, loss_fn = build("mlp")
    x, y = data[0]
    dbg.start(model=model)
    with torch.inference_mode():
        probe = model(x)
        probe.mul_(2.0)            # in-place work on an inference tensor
    loss_fn(model(x), y).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data_ = dump_of(tmp_path)["dump"]["data"]
    out = data_["Module.fc2.Linear.forward.0"]["output"][0]
    assert out["Max"] == pytest.approx(probe.max().item() / 2.0) and out["shape"] == [4, 4]
    assert "Module.fc2.Linear.forward.1" in data_ and "Module.fc2.Linear.backward.1" in data_


def test_a_modules_namedtuple_and_dataclass_outputs_by_field(tmp_path):
    """A namedtuple output is a dict of its fields, and a dataclass one (transformers' ModelOutput, an OrderedDict of
    its fields that are not None) a dict of every field, None ones included, as the reference writes them; their
    tensors' gradients are still recorded."""
    import collections
    import dataclasses

    Pair = collections.namedtuple("Pair", ["a", "b"])

    @dataclasses.dataclass
    class Out(collections.OrderedDict):
        loss: Optional[torch.Tensor] = None
        logits: Optional[torch.Tensor] = None

        def __post_init__(self):     # (as ModelOutput: only the fields that are set are keys)
            for f in dataclasses.fields(self):
                if getattr(self, f.name) is not None:
                    self[f.name] = getattr(self, f.name)

    @dataclasses.dataclass
    class Plain:
        hidden: torch.Tensor
        note: Optional[str] = None

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            h = self.lin(x)
            return Pair(h, 2), Out(logits=h * 3), Plain(h * 4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            pair, out, plain = self.inner(x)
            return pair.a.sum() + out["logits"].sum() + plain.hidden.sum()

    torch.manual_seed(0)
    net = Net()
    dbg = make_debugger(tmp_path, level="L0", summary_mode="statistics")
    with dbg.collect(net):
        net(torch.randn(2, 3)).backward()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    pair, out, plain = data["Module.inner.Inner.forward.0"]["output"]
    assert list(pair) == ["a", "b"] and pair["a"]["shape"] == [2, 3] and pair["b"] == {"type": "int", "value": 2}
    assert list(out) == ["loss", "logits"] and out["loss"] is None and out["logits"]["shape"] == [2, 3]
    assert list(plain) == ["hidden", "note"] and plain["note"] is None
    # the gradients of every tensor in them, a plain dataclass's too
    assert [i["shape"] for i in data["Module.inner.Inner.backward.0"]["input"]] == [[2, 3], [2, 3], [2, 3]]


def test_an_in_place_call_on_a_modules_input_records_its_own_backward(tmp_path):
    """At mix, ReLU(inplace=True)'s F.relu returns the module's input, changed: its backward is its own node's
    (the gradient after the mask), not the module's share of the input as for a call that returns its input as it
    is (`x.float()`)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True), torch.nn.Linear(4, 1))
    x = torch.randn(8, 4)
    dbg = make_debugger(tmp_path, level="mix", summary_mode="statistics")
    with dbg.collect(net):
        net(x).sum().backward()
    dbg.close()
    rec = dump_of(tmp_path)["dump"]["data"]["Functional.relu.0.backward"]
    h = net[0](x)
    h.retain_grad()
    r = torch.relu(h)
    r.retain_grad()
    net[2](r).sum().backward()
    assert rec["input"][0]["Norm"] == pytest.approx(r.grad.norm().item(), rel=1e-6)
    assert rec["output"][0]["Norm"] == pytest.approx(h.grad.norm().item(), rel=1e-6)
    assert h.grad.norm() != r.grad.norm()


def test_an_operator_whose_second_output_gets_no_gradient_keeps_its_backward_record(tmp_path):
    """F.multi_head_attention_forward returns the attention output and weights; with the weights unused only the
    output's node runs in backward. The record comes at the step's end with the gradients that came, as the
    reference has it (it was missing: the record waited for both nodes)."""
    torch.manual_seed(0)
    att = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(4, 5, 8)
    dbg = make_debugger(tmp_path, level="mix", summary_mode="statistics")
    with dbg.collect(att):
        out, _weights = att(x, x, x)
        out.sum().backward()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    rec = data["Functional.multi_head_attention_forward.0.backward"]
    assert [i["shape"] for i in rec["input"]] == [[5, 4, 8]]        # the output's gradient (sequence first)
    assert rec["input"][0]["Norm"] > 0 and len(rec["output"]) == 1


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


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_parameters_and_buffers_written_without_a_version_bump_are_summarised_anew(tmp_path, level):
    """batch_norm's CPU kernel updates the running statistics in place without bumping their version, and so does
    a write through .data (an EMA, a hand-written optimizer): a second forward in the step recorded the values of
    the first, from the statistics cache. Parameters are not remembered, and a batch_norm call forgets its buffers."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    seen = []
    for _ in range(3):
        seen.append((model[1].running_mean.max().item(), model[0].weight.max().item()))
        model(torch.randn(8, 4) * 3 + 1).sum().backward()
        model[0].weight.data.add_(10.0)
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    for i, (running_max, weight_max) in enumerate(seen):
        if level == "mix":
            bn = data[f"Functional.batch_norm.{i}.forward"]["input_args"]
            assert bn[1]["Max"] == pytest.approx(running_max, rel=1e-6), i
        assert data[f"Module.0.Linear.forward.{i}"]["parameters"]["weight"]["Max"] == pytest.approx(weight_max), i


def test_lazy_unfrozen_and_replaced_parameters_get_their_gradient_records(tmp_path):
    """Parameter hooks were put once, on the parameters that needed a gradient at the first start(): a LazyLinear
    (its parameters not materialised yet) was left out whole, a layer unfrozen later and a parameter replaced by a
    new one (resize_token_embeddings) never got parameters_grad again."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                                torch.nn.Linear(4, 2))
    model[2].requires_grad_(False)
    dbg = make_debugger(tmp_path, level="L0", steps=3)
    for step in range(3):
        if step == 1:
            model[2].requires_grad_(True)                                       # unfrozen between steps
            model[3].weight = torch.nn.Parameter(torch.randn(2, 4))            # replaced between steps
        dbg.start(model=model)
        model(torch.randn(2, 3)).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    grads = [{k: sorted(v) for k, v in dump_of(tmp_path, step)["dump"]["data"].items() if "parameters_grad" in k}
             for step in range(3)]
    for step in range(3):
        assert grads[step]["Module.0.LazyLinear.parameters_grad.0"] == ["bias", "weight"]
        assert grads[step]["Module.3.Linear.parameters_grad.0"] == ["bias", "weight"]
        assert ("Module.2.Linear.parameters_grad.0" in grads[step]) == (step > 0)
    assert "Module.0.LazyLinear.forward.0" in dump_of(tmp_path, 0)["dump"]["data"]
    last = dump_of(tmp_path, 2)["dump"]["data"]["Module.3.Linear.parameters_grad.0"]["weight"][0]
    assert last["Norm"] == pytest.approx(model[3].weight.grad.norm().item(), rel=1e-6)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_parameters_unfrozen_or_replaced_after_start_get_their_gradient_records_in_that_step(tmp_path, level,
                                                                                             monkeypatch):
    """The parameter hooks were checked at start() alone: a layer unfrozen, or a parameter replaced, between
    start() and the forward had no parameters_grad that step (the reference hooks the parameters at each forward,
    and has them); a Linear without bias, whose empty slot once read as a change, is not hooked anew each call."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                                torch.nn.Linear(4, 2))
    model[2].requires_grad_(False)
    from tbprobe.collector.pytorch.param_grads import ParamGrads

    hooked = []
    orig = ParamGrads.hook
    monkeypatch.setattr(ParamGrads, "hook", lambda self, mod: hooked.append(self.prefix) or orig(self, mod))
    dbg = make_debugger(tmp_path, level=level, steps=2)
    for step in range(2):
        dbg.start(model=model)
        if step == 1:
            model[2].requires_grad_(True)
            model[3].weight = torch.nn.Parameter(torch.randn(2, 4))
        model(torch.randn(2, 3)).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = [dump_of(tmp_path, step)["dump"]["data"] for step in range(2)]
    assert "Module.2.Linear.parameters_grad.0" not in data[0]
    assert sorted(data[1]["Module.2.Linear.parameters_grad.0"]) == ["bias", "weight"]
    got = data[1]["Module.3.Linear.parameters_grad.0"]["weight"][0]
    assert got["Norm"] == pytest.approx(model[3].weight.grad.norm().item(), rel=1e-6)
    assert sorted(data[1]["Module.0.Linear.parameters_grad.0"]) == ["weight"]
    # hooked once each at the first start(), and again only the two that changed
    assert sorted(hooked) == sorted(["Module.0.Linear", "Module.2.Linear", "Module.3.Linear",
                                     "Module.2.Linear", "Module.3.Linear"])


class _Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        import collections

        y = self.fc(x)
        return collections.namedtuple("Pair", "a b")(y, y * 2)


def test_a_module_output_is_recorded_before_the_users_forward_hooks_change_it(tmp_path):
    """tbprobe's forward hook ran after the user's hooks registered before start(): it recorded their output,
    not the module's (msprobe records the module's either way). A namedtuple output is a dict of its fields, as
    in the reference (it was a list)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Pair())
    model[0].register_forward_hook(lambda m, a, o: o * 100)
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    x = torch.randn(2, 4)
    raw = torch.nn.functional.linear(x, model[0].weight, model[0].bias)
    out = model(x)
    (out.a.sum() + out.b.sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert data["Module.0.Linear.forward.0"]["output"][0]["Max"] == pytest.approx(raw.max().item())
    assert data["Module.1._Pair.forward.0"]["input_args"][0]["Max"] == pytest.approx(100 * raw.max().item())
    pair = data["Module.1._Pair.forward.0"]["output"]
    assert sorted(pair) == ["a", "b"] and pair["b"]["Max"] == pytest.approx(2 * pair["a"]["Max"])


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("how", ["replace", "in place"])
def test_a_users_forward_hook_changing_the_output_leaves_the_modules_record_whole(tmp_path, level, how):
    """A forward hook registered before start() that returns another output (`o * 2`) left the forward record
    on the module's own output but its backward on the gradient of the hook's (half the module's); one that
    changes the output in place (`o.mul_(2)`) was seen in the forward record too. Both records are the module's
    own now, as the reference's, and at mix the hook's operators hang beside the module, not inside it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    seen = {}

    def hook(mod, args, out):
        seen["out"] = out.detach().clone()
        out.register_hook(lambda g: seen.__setitem__("grad", g.clone()))
        return out.mul_(2) if how == "in place" else out * 2

    model[0].register_forward_hook(hook)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    with dbg.collect(model):
        model(torch.randn(3, 4)).pow(2).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    dump = dump_of(tmp_path)
    data, construct = dump["dump"]["data"], dump["construct"]
    out = data["Module.0.Linear.forward.0"]["output"][0]
    assert out["Max"] == pytest.approx(seen["out"].max().item()) and out["Norm"] == pytest.approx(
        seen["out"].norm().item())
    assert sorted(data["Module.0.Linear.forward.0"]["parameters"]) == ["bias", "weight"]
    grad = data["Module.0.Linear.backward.0"]["input"][0]
    assert grad["Norm"] == pytest.approx(seen["grad"].norm().item())
    if level == "mix":
        mul = "Tensor.mul_.0" if how == "in place" else "Tensor.__mul__.0"
        assert construct[f"{mul}.forward"] is None and construct["Functional.linear.0.forward"] == (
            "Module.0.Linear.forward.0")
        names = list(data)
        assert names.index("Module.0.Linear.forward.0") < names.index(f"{mul}.forward")


class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return torch.mul(grad, 2.0)   # a tensor-parallel layer's all_reduce, say


class _Col(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(_CopyToRegion.apply(x))


def test_calls_in_a_backward_and_in_an_optimizers_closure_hang_under_the_module_that_runs(tmp_path):
    """A custom Function's backward (tensor parallelism's copy-to-region all_reduce) ran its calls at the top of
    the graph: they hang under the module whose backward runs, as in the reference. LBFGS's closure runs the
    model inside optimizer.step(): its modules' calls hung under "optimizer", and the modules too."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Col())
    opt = torch.optim.LBFGS(model.parameters(), max_iter=1)
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    dbg.start(model=model)
    x = torch.randn(2, 4)
    model(x).sum().backward()

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    dbg.stop()
    dbg.step()
    dbg.close()
    construct = dump_of(tmp_path)["construct"]
    assert construct["Torch.mul.0.forward"] == "Module.1._Col.backward.0"
    assert construct["Module.0.Linear.forward.1"] is None
    assert construct["Functional.linear.2.forward"] == "Module.0.Linear.forward.1"
    assert any(parent == "optimizer" for parent in construct.values())   # the step's own operators


class _RowRegion(torch.nn.Module):
    """A row-parallel layer: its reduce region's backward calls torch, and its output is its caller's output."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _CopyToRegion.apply(self.fc(x))


class _Mlp(torch.nn.Module):   # Megatron's ParallelMLP: returns its RowParallelLinear's output as it is
    def __init__(self):
        super().__init__()
        self.row = _RowRegion()

    def forward(self, x):
        return self.row(x)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = _Mlp()

    def forward(self, x):
        return self.mlp(x)


def test_calls_in_an_inner_modules_backward_hang_under_it_when_its_output_is_the_outer_ones(tmp_path):
    """Modules ending on one autograd node (an inner module's output returned as it is by the modules around it)
    begin their backward on that node's gradient, the inner one first: the outermost went on top of the open
    backwards and the inner one's calls (a reduce region's collective) hung under it. As the reference: under the
    innermost, at any depth."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Block())
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    with dbg.collect(model):
        model(torch.randn(2, 4)).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    construct = dump_of(tmp_path)["construct"]
    assert construct["Torch.mul.0.forward"] == "Module.1.mlp.row._RowRegion.backward.0"
    assert construct["Module.1.mlp.row._RowRegion.backward.0"] == "Module.1.mlp._Mlp.backward.0"
    assert construct["Module.1.mlp._Mlp.backward.0"] == "Module.1._Block.backward.0"


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
