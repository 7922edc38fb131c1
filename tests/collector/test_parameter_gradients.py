"""The parameters_grad records: the accumulated gradient after each backward pass (micro-batches), one record per
pass with the gradients that came in it, none for a module that did not run (tied parameters), and the
parameters that need a gradient only later (a LazyLinear, a layer unfrozen, a parameter replaced, before or
after start())."""

import pytest
import torch
from conftest import dump_of, make_debugger
from run_model import build


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
