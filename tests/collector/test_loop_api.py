"""The loop conveniences around start/stop/step, on real CPU training: step_fn (on plain, generator and coroutine
functions), collect() and capture() blocks (nested, failing, narrowing a step to one module), set_init_step, and
the model start() is given (a model sharing modules with one given before, a list of chunks, FSDP wrappers)."""
import os

import pytest
import torch
from conftest import dump_of, load_rank, make_debugger, rank_dirs
from run_model import build

from tbprobe import PrecisionDebugger
from tbprobe.errors import TbprobeError


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


def test_a_module_level_loop_block_without_a_model_says_where_to_give_it(tmp_path):
    model, data, loss_fn = build("mlp")
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])

    @dbg.step_fn
    def train_step(x, y):
        loss_fn(model(x), y).backward()

    for block in (lambda: train_step(*data[0]), lambda: dbg.collect().__enter__()):
        with pytest.raises(TbprobeError) as info:
            block()
        # (the user called no start(): each way of giving the model is named)
        assert all(way in str(info.value) for way in ("start(model=...)", "collect(model)",
                                                       "PrecisionDebugger(..., model=...)")), info.value
    dbg.close()
