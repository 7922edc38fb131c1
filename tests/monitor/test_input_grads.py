"""Input gradients are each module's own share, as the reference's full backward hook gives them, and training
stays bit for bit the same.

The model is a pre-LN transformer block: q_proj, k_proj and v_proj take the same normed tensor, the residual
stream feeds both the norm and the residual add, and the block gets a causal mask (a keyword argument that needs
no gradient). The monitor took each input's gradient with a tensor hook, which is the input tensor's total
gradient: every consumer's at once (q_proj.input = k_proj.input = v_proj.input).
"""
import math

import pytest
import torch

import tbprobe.monitor.hooks as hooks
from tbprobe.monitor import TrainerMon
from tests.monitor.helpers import read_scalars, write_config

D, T = 8, 5


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(D, D)
        self.k_proj = torch.nn.Linear(D, D)
        self.v_proj = torch.nn.Linear(D, D)
        self.o_proj = torch.nn.Linear(D, D)

    def forward(self, x, mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        w = (q @ k.transpose(-1, -2)) / math.sqrt(D) + mask
        return self.o_proj(w.softmax(-1) @ v)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(D)
        self.attn = Attn()
        self.post = torch.nn.Identity()   # returns its input as it is: no node of its own
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.GELU(), torch.nn.Linear(2 * D, D))

    def forward(self, x, mask=None):
        x = x + self.attn(self.norm(x), mask=mask)
        return self.post(x + self.mlp(x))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(3, D)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(D, 2)

    def forward(self, x):
        mask = torch.full((T, T), float("-inf")).triu(1)
        h = self.embed(x)
        for b in self.blocks:
            h = b(h, mask=mask)
        return self.head(h)


TARGETS = ["blocks.0", "blocks.0.norm", "blocks.0.attn", "blocks.0.attn.q_proj", "blocks.0.attn.k_proj",
           "blocks.0.attn.v_proj", "blocks.0.attn.o_proj", "blocks.0.mlp", "blocks.0.mlp.0", "blocks.0.post",
           "blocks.1.attn.q_proj", "head"]


def _batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(2, T, 3, generator=g)


def _true_shares(model, x):
    """Each target module's share of its first input's gradient, by autograd itself, on a copy of the model (no
    monitor hooks there): the module gets an alias of its input, and the loss's gradient with respect to the alias
    is what that module alone sends back."""
    copied = type(model)()
    copied.load_state_dict(model.state_dict())
    model = copied
    aliases, handles = {}, []
    named = dict(model.named_modules())
    for name in TARGETS:
        def pre(mod, args, kwargs, name=name):
            a = args[0].view_as(args[0])
            aliases[name] = a
            return (a,) + args[1:], kwargs
        handles.append(named[name].register_forward_pre_hook(pre, with_kwargs=True))
    loss = model(x).pow(2).mean()
    grads = torch.autograd.grad(loss, [aliases[n] for n in TARGETS])
    for h in handles:
        h.remove()
    return {n: g for n, g in zip(TARGETS, grads)}


def _train(tmp_path, steps, monitor=True, ops=("norm", "mean", "max")):
    tmp_path.mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = None
    if monitor:
        mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={n: {} for n in TARGETS},
                                      xy_distribution=True, ops=list(ops)))
        mon.set_monitor(model, opt)
    losses, truth = [], {}
    for step in range(steps):
        x = _batch(step)
        if step == 1:   # (the true shares at step 1's weights)
            truth = _true_shares(model, x)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    if mon is not None:
        mon.close()
        assert mon.errors == 0
    return model, losses, truth


def _input_grad(s, name, op, step):
    tag = f"{name}/input_grad.0_{op}" if f"{name}/input_grad.0_{op}" in s else f"{name}/input_grad_{op}"
    return s[tag][step]


def _check_shares(run, truth, rel):
    s = read_scalars(run)
    for name in TARGETS:
        g = truth[name].double()
        assert _input_grad(s, name, "norm", 1) == pytest.approx(g.norm().item(), rel=rel), name
        assert _input_grad(s, name, "max", 1) == pytest.approx(g.max().item(), rel=rel), name
    # the normed tensor's consumers each have their own share, not the total of all three
    q, k, v = (_input_grad(s, f"blocks.0.attn.{p}_proj", "norm", 1) for p in "qkv")
    total = (truth["blocks.0.attn.q_proj"] + truth["blocks.0.attn.k_proj"] + truth["blocks.0.attn.v_proj"]).norm()
    assert len({round(q, 6), round(k, 6), round(v, 6)}) == 3
    assert _input_grad(s, "blocks.0.attn", "norm", 1) == pytest.approx(total.item(), rel=rel)
    # the mask needs no gradient: no input-gradient series for it
    assert "blocks.0/input_grad.1_norm" not in s and "blocks.0/input.1_norm" in s
    return s


def test_input_gradients_are_each_modules_share_and_training_is_bit_for_bit_the_same(tmp_path):
    assert hooks.call_start is not None   # (the extension is built by the project's install)
    model, losses, truth = _train(tmp_path / "mon", 4)
    _check_shares(str(tmp_path / "mon" / "out" / "rank0"), truth, rel=1e-5)
    plain, plain_losses, _ = _train(tmp_path / "plain", 4, monitor=False)
    assert losses == plain_losses
    for (n, p), (_, q) in zip(model.named_parameters(), plain.named_parameters()):
        assert torch.equal(p, q), n


def test_without_the_extension_views_of_the_inputs_give_the_same_shares(tmp_path, monkeypatch):
    """Without _cgrad (and under torch.compile) the module gets plain views of its inputs, as the collector's
    module hooks do; their gradients are the module's share too."""
    monkeypatch.setattr(hooks, "call_start", None)
    _, _, truth = _train(tmp_path, 2)
    _check_shares(str(tmp_path / "out" / "rank0"), truth, rel=1e-5)


def test_input_shares_per_micro_step(tmp_path):
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"blocks.0.attn.q_proj": {}},
                                  xy_distribution=True))
    mon.set_monitor(model, opt, grad_acc_steps=2)
    truth = []
    for micro in range(2):
        x = _batch(micro)
        truth.append(_true_shares(model, x)["blocks.0.attn.q_proj"].norm().item())
        (model(x).pow(2).mean() / 2).backward()
    opt.step()
    mon.close()
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    for micro in range(2):
        # (the loss is halved here: so is every gradient)
        assert s[f"blocks.0.attn.q_proj:micro{micro}/input_grad_norm"][0] == pytest.approx(truth[micro] / 2,
                                                                                           rel=1e-5)


def test_an_input_the_module_does_not_differentiate_through_has_no_gradient_series(tmp_path):
    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(D, D)

        def forward(self, x, unused):
            return self.fc(x) + unused.detach()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = torch.nn.Linear(D, D)
            self.gate = Gate()

        def forward(self, x):
            h = self.pre(x)
            return self.gate(h, h * 2)

    torch.manual_seed(0)
    model = M()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"gate": {}}, xy_distribution=True))
    mon.set_monitor(model, opt)
    x = torch.randn(3, D)
    h = model.pre(x).detach().requires_grad_()
    want = torch.autograd.grad(model.gate(h, h * 2).pow(2).mean(), h)[0]
    model(x).pow(2).mean().backward()
    opt.step()
    mon.close()
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    assert s["gate/input_grad.0_norm"][0] == pytest.approx(want.norm().item(), rel=1e-5)
    assert "gate/input_grad.1_norm" not in s   # (its tensor's gradient was the other consumer's)


def test_under_torch_compile_the_views_give_the_shares(tmp_path, monkeypatch):
    """Dynamo cannot trace the extension's calls: where it traces the monitor's hooks, a compiled model's modules
    get views of their inputs; where it runs them eagerly (tbprobe's files on its skip list, as the collector puts
    them there), the extension gives the shares. Either way each module's share is right."""
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={n: {} for n in TARGETS},
                                  xy_distribution=True))
    mon.set_monitor(model, opt)
    compiled = torch.compile(model, backend="eager")
    truth = _true_shares(model, _batch(0))
    compiled(_batch(0)).pow(2).mean().backward()
    opt.step()
    mon.close()
    assert mon.errors == 0
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    for name in TARGETS:
        assert _input_grad(s, name, "norm", 0) == pytest.approx(truth[name].norm().item(), rel=1e-5), name
