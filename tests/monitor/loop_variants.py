"""Training loops in the shapes real users write, for the training monitor (models from the collector's
tests/collector/patterns_run.py): each takes `attach(model, optimizer, grad_acc_steps)`, called once the model
and optimizer exist (None: no monitor), and returns (model, optimizer, losses), seeded. Run with msprobe's python
to compare its monitor's output with tbprobe's:

usage: loop_variants.py TOOL LOOP CONFIG [STEPS]      (TOOL: tbprobe | msprobe | none)
"""
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "collector"))
from patterns_run import Mlp, SparseNet, TokenNet  # noqa: E402


def _attach(attach, model, opt, grad_acc=1):
    if attach is not None:
        attach(model, opt, grad_acc)


def lbfgs(attach, steps):
    """LBFGS: the closure runs forward and backward up to max_iter times inside one optimizer.step()."""
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3, history_size=4)
    _attach(attach, model, opt)
    x, y = torch.randn(6, 8), torch.randn(6, 2)
    losses = []
    for _ in range(steps):
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        losses.append(opt.step(closure).detach().clone())
    return model, opt, losses


def scaler(attach, steps, dtype=torch.float16):
    """Autocast on the CPU with a GradScaler whose first scale overflows: step 0 is skipped (inf found, the
    optimizer's step is not called), the scale backs off to 2**10; unscale_ and clip_grad_norm_ before step."""
    torch.manual_seed(0)
    model = TokenNet()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _attach(attach, model, opt)
    sc = torch.amp.GradScaler("cpu", init_scale=2.0 ** 40, backoff_factor=2.0 ** -30, growth_interval=1)
    losses = []
    for _ in range(steps):
        t = torch.randint(0, 10, (4, 6))
        with torch.autocast(device_type="cpu", dtype=dtype):
            logits = model(t)
        loss = F.cross_entropy(logits.float().view(-1, 10), t.view(-1))
        sc.scale(loss).backward()
        sc.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        sc.step(opt)
        sc.update()
        opt.zero_grad()
        losses += [loss.detach().clone(), torch.tensor(sc.get_scale())]
    return model, opt, losses


def accum(attach, steps, micro=4):
    """Gradient accumulation: `micro` forward/backward passes per optimizer step."""
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _attach(attach, model, opt, micro)
    losses = []
    for _ in range(steps):
        for _ in range(micro):
            loss = model(torch.randn(4, 8)).square().mean() / micro
            loss.backward()
            losses.append(loss.detach().clone())
        opt.step()
        opt.zero_grad()
    return model, opt, losses


def optim(attach, steps, kind):
    """AdamW(foreach=True) / AdamW(fused=True) / SGD with momentum, clip_grad_norm_ before the step."""
    torch.manual_seed(0)
    model = Mlp()
    if kind == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, **{kind: True})
    _attach(attach, model, opt)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return model, opt, losses


def ema(attach, steps):
    """An EMA copy updated under no_grad after each step, and its forward (an eval of the copy)."""
    torch.manual_seed(0)
    model = Mlp()
    shadow = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _attach(attach, model, opt)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for e, p in zip(shadow.parameters(), model.parameters()):
                e.lerp_(p, 0.1)
        losses += [loss.detach().clone(), shadow(x).detach().clone()]
    return model, opt, losses


def distill(attach, steps):
    """A frozen teacher in eval() under no_grad, inside the model given to the monitor; the student trains."""
    torch.manual_seed(0)

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval().requires_grad_(False)
            self.student = Mlp(out=4)

    model = Pair()
    opt = torch.optim.Adam(model.student.parameters(), lr=0.01)
    _attach(attach, model, opt)
    losses = []
    for _ in range(steps):
        x = torch.randn(5, 8)
        with torch.no_grad():
            soft = F.softmax(model.teacher(x) / 2.0, dim=-1)
        loss = F.kl_div(F.log_softmax(model.student(x) / 2.0, dim=-1), soft, reduction="batchmean")
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return model, opt, losses


def unfreeze(attach, steps):
    """A fine-tuning schedule: fc1 frozen (requires_grad False) for the first two steps, then unfrozen; the
    optimizer holds every parameter from the start (frozen ones have no gradient and are skipped)."""
    torch.manual_seed(0)
    model = Mlp()
    model.fc1.requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _attach(attach, model, opt)
    losses = []
    for step in range(steps):
        if step == 2:
            model.fc1.requires_grad_(True)
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return model, opt, losses


def func(attach, steps):
    """torch.func: functional_call with the model's own parameters (trained), per-sample gradients by
    vmap(grad(...)) over detached weights, whose norms are part of the result."""
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _attach(attach, model, opt)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(4, 8), torch.randn(4, 2)
        params = dict(model.named_parameters())
        loss = F.mse_loss(functional_call(model, params, (x,)), y)
        detached = {k: v.detach() for k, v in params.items()}

        def sample_loss(p, xi, yi):
            return F.mse_loss(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
        per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(detached, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses += [loss.detach().clone(), per_sample["fc1.weight"].norm(dim=(1, 2))]
    return model, opt, losses


def sparse(attach, steps):
    """nn.Embedding(sparse=True) trained by SparseAdam (the monitored optimizer), the dense head by Adam."""
    torch.manual_seed(0)
    model = SparseNet()
    sparse_opt = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.05)
    dense_opt = torch.optim.Adam(model.head.parameters(), lr=0.05)
    _attach(attach, model, sparse_opt)
    losses = []
    for _ in range(steps):
        t = torch.randint(0, 20, (4, 3))
        loss = model(t).square().mean()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        losses.append(loss.detach().clone())
    return model, sparse_opt, losses


def add_group(attach, steps):
    """A parameter added to the optimizer mid-run (add_param_group at step 2: a learned output scale)."""
    torch.manual_seed(0)
    model = Mlp()
    model.scale = nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([p for n, p in model.named_parameters() if n != "scale"], lr=0.01)
    _attach(attach, model, opt)
    losses = []
    for step in range(steps):
        if step == 2:
            opt.add_param_group({"params": [model.scale], "lr": 0.1})
        out = model(torch.randn(4, 8))
        if step >= 2:
            out = out * model.scale
        loss = out.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return model, opt, losses


def replace(attach, steps):
    """A submodule replaced between steps (a new head at step 2, added to the optimizer as a new group)."""
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _attach(attach, model, opt)
    losses = []
    for step in range(steps):
        if step == 2:
            model.fc2 = nn.Linear(8, 2)
            opt.add_param_group({"params": list(model.fc2.parameters())})
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    return model, opt, losses


LOOPS = {
    "lbfgs": lbfgs,
    "scaler-fp16": scaler,
    "scaler-bf16": lambda a, s: scaler(a, s, torch.bfloat16),
    "accum": accum,
    "adamw-foreach": lambda a, s: optim(a, s, "foreach"),
    "adamw-fused": lambda a, s: optim(a, s, "fused"),
    "sgd-momentum": lambda a, s: optim(a, s, "sgd"),
    "ema": ema,
    "distill": distill,
    "unfreeze": unfreeze,
    "func": func,
    "sparse": sparse,
    "add-group": add_group,
    "replace": replace,
}


def main(argv):
    tool, loop, cfg = argv[:3]
    steps = int(argv[3]) if len(argv) > 3 else 4
    mon = None
    if tool == "msprobe":
        from msprobe.pytorch import TrainerMon
    elif tool == "tbprobe":
        from tbprobe.monitor import TrainerMon
    if tool != "none":
        mon = TrainerMon(cfg, params_have_main_grad=False)   # (msprobe's default is True)

    def attach(model, opt, grad_acc):
        mon.set_monitor(model, opt, grad_acc_steps=grad_acc)
    LOOPS[loop](attach if mon is not None else None, steps)
    if hasattr(mon, "close"):
        mon.close()


if __name__ == "__main__":
    main(sys.argv[1:])
