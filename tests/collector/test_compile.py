"""The collector beside torch.compile: compiled code between collected steps, and a compiled model collected."""
import pytest
import torch
import torch._dynamo as dynamo
from conftest import load_rank, make_debugger, rank_dirs
from run_model import build, collected_step


@pytest.fixture(autouse=True)
def fresh_dynamo():
    dynamo.reset()
    dynamo.utils.counters.clear()
    yield
    dynamo.reset()


def _names(dump_path, step):
    return sorted(load_rank(rank_dirs(dump_path, step)[0])["dump"]["data"])


def test_compiled_code_between_collected_steps(tmp_path):
    """At mix the operator capture's wrappers stay on torch.Tensor between collected steps: compiled code run there
    traces through them once, records nothing, and is not recompiled when they go."""
    @torch.compile(backend="eager")
    def helper(a, b):
        return (a + b) * 2 - a.sum()

    dbg = make_debugger(tmp_path, level="mix", steps=3)
    model, data, loss_fn = build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    for step in range(5):                      # steps 0-2 collected, 3-4 not
        collected_step(dbg, model, opt, loss_fn, *data[step % len(data)])
        assert torch.equal(helper(x, x * 3), (x + x * 3) * 2 - x.sum())
        dbg.step()
    dbg.close()
    names = [_names(str(tmp_path / "dump"), s) for s in range(3)]
    assert names[0] == names[1] == names[2]
    assert "Functional.linear.0.forward" in names[0]
    assert not any(n.startswith(("Tensor.__add__", "Tensor.sum", "Tensor.__mul__")) for n in names[0])
    assert dynamo.utils.counters["frames"]["total"] == 1
    assert not dynamo.utils.counters["graph_break"]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_compiled_model_records_what_the_eager_model_records(tmp_path, level, recwarn):
    """Dynamo runs tbprobe's hooks eagerly (graph breaks at them): the records and the training are the eager
    run's, and dynamo has nothing to warn about (it once warned that it cannot trace _cgrad.hook_node)."""
    runs = []
    for compiled in (False, True):
        out = tmp_path / ("compiled" if compiled else "eager")
        out.mkdir()
        dbg = make_debugger(out, level=level, steps=2)
        model, data, loss_fn = build("mlp")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        run = torch.compile(model, backend="eager") if compiled else model
        losses = []
        for step in range(2):
            losses.append(collected_step(dbg, model, opt, loss_fn, *data[step], forward=run).detach())
            dbg.step()
        dbg.close()
        dump = load_rank(rank_dirs(str(out / "dump"), 1)[0])
        runs.append((losses, sorted(dump["dump"]["data"]), dump["construct"], model.state_dict()))
    (l_e, n_e, c_e, w_e), (l_c, n_c, c_c, w_c) = runs
    assert all(torch.equal(a, b) for a, b in zip(l_e, l_c))
    assert all(torch.equal(w_e[k], w_c[k]) for k in w_e)
    assert n_e == n_c and len(n_e) > 5
    assert c_e == c_c
    assert not [str(w.message) for w in recwarn if "tbprobe" in str(w.message)]


@pytest.mark.parametrize("whole", [True, False])
def test_a_model_compiled_and_run_before_the_first_start_is_recorded(tmp_path, whole, caplog):
    """Dynamo leaves module hooks out of its guards, so code compiled before start() added them never called
    them: an empty dump at L0, without a word (warm-up steps, a later step window). That code is dropped once, with
    a warning, and the collected steps record what the eager model records."""
    runs = []
    for compiled in (False, True):
        out = tmp_path / ("compiled" if compiled else "eager")
        out.mkdir()
        model, data, loss_fn = build("mlp")
        if compiled and not whole:   # only the first layer compiled, inside the eager model
            model.fc1 = torch.compile(model.fc1, backend="eager")
        run = torch.compile(model, backend="eager") if compiled and whole else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        collected_step(None, model, opt, loss_fn, *data[0], forward=run)      # a warm-up step, not collected
        dbg = make_debugger(out, level="L0", steps=2)
        for step in range(2):
            collected_step(dbg, model, opt, loss_fn, *data[step], forward=run)
            dbg.step()
        dbg.close()
        assert dbg.hook_errors == 0
        runs.append([_names(str(out / "dump"), s) for s in range(2)])
    eager, compiled = runs
    for names in eager:
        assert len(names) > 5
    if whole:
        assert compiled == eager
    else:   # the compiled layer's records come under its wrapper, OptimizedModule, and the module it wraps
        for names in compiled:
            fc1 = [n.replace("Module.fc1._orig_mod.", "Module.fc1.") for n in names
                   if n.startswith("Module.fc1._orig_mod.")]
            assert fc1 == [n for n in eager[0] if n.startswith("Module.fc1.")]
            assert "Module.fc1.OptimizedModule.forward.0" in names
            assert [n for n in names if not n.startswith("Module.fc1.")] == \
                [n for n in eager[0] if not n.startswith("Module.fc1.")]
    assert any("compiles again" in r.getMessage() for r in caplog.records)


class _Body(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h.exp().sin().cos().sum() + h.tanh().max()


@pytest.mark.parametrize("level", ["L1", "mix"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tensor_methods_in_compiled_code_keep_their_names(tmp_path, level, backend, recwarn):
    """Dynamo compiled the operator mode's handler as a frame of its own, once, for `h.exp()`: its guards do not
    tell Tensor methods apart, so sin, cos, sum, tanh and max ran that code and were recorded as Tensor.exp.1-5.
    tbprobe's frames are left to run eagerly; the names are the eager model's, and dynamo warns of no graph break
    in tbprobe's code. start() with the compiled wrapper names the modules as the eager model's (no _orig_mod)."""
    names = []
    for compiled in (False, True):
        out = tmp_path / str(compiled)
        out.mkdir()
        torch.manual_seed(0)
        model = _Body()
        run = torch.compile(model, backend=backend) if compiled else model
        dbg = make_debugger(out, level=level, steps=1)
        dbg.start(model=run)
        run(torch.randn(3, 4)).backward()
        dbg.stop()
        dbg.step()
        dbg.close()
        assert dbg.hook_errors == 0
        names.append(list(load_rank(rank_dirs(str(out / "dump"), 0)[0])["dump"]["data"]))
    assert names[0] == names[1]
    assert [n for n in names[1] if n.startswith("Tensor.") and n.endswith("forward")] == [
        "Tensor.exp.0.forward", "Tensor.sin.0.forward", "Tensor.cos.0.forward", "Tensor.sum.0.forward",
        "Tensor.tanh.0.forward", "Tensor.max.0.forward", "Tensor.__add__.0.forward"]
    if level == "mix":
        assert "Module.fc.Linear.forward.0" in names[1]
    assert not [str(w.message) for w in recwarn if "tbprobe" in str(w.message)]


def test_a_compiled_attention_at_mix_gives_no_dynamo_warning(tmp_path, recwarn):
    """nn.MultiheadAttention compiled at mix: dynamo traced into the operator mode's record of a call (reading
    the caller's frame for the arguments as written) and warned that it cannot trace sys._getframe. tbprobe's
    work in the mode runs with torch functions off now, where dynamo breaks the graph without a word."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, h):
            a, _ = self.mha(h, h, h)
            return self.fc(h + a).sum()

    dynamo.reset()
    model = Net()
    run = torch.compile(model, backend="eager")
    dbg = make_debugger(tmp_path, level="mix", steps=2)
    for _ in range(2):
        dbg.start(model=model)
        run(torch.randn(2, 3, 8)).backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    assert not [str(w.message) for w in recwarn if "getframe" in str(w.message) or "tbprobe" in str(w.message)]
    names = load_rank(rank_dirs(str(tmp_path / "dump"), 1)[0])["dump"]["data"]
    assert any(n.startswith("Module.mha.MultiheadAttention.forward") for n in names)
