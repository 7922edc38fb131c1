"""Small training loops in the patterns real users write (activation checkpointing, gradient accumulation, eval
passes inside a step, modules returning dicts/namedtuples/dataclasses/None, shared modules, bf16 autocast, model
chunks that share a module, functionals taken before the collector starts), each trainable with tbprobe, msprobe or
no collector; used by test_training_patterns.py, and run with the msprobe peer's python to compare the node sets:

usage: patterns_run.py TOOL PATTERN LEVEL DUMP_PATH [STEPS [SUMMARY_MODE]]      (TOOL: tbprobe | msprobe)
"""
import collections
import dataclasses
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc(x)))


class CheckpointNet(nn.Module):
    """Two blocks under torch.utils.checkpoint, inside the model's forward."""

    def __init__(self, reentrant):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 2)
        self.reentrant = reentrant

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=self.reentrant)
        return self.head(x)


Pair = collections.namedtuple("Pair", "y aux")


@dataclasses.dataclass
class Output:
    y: torch.Tensor
    aux: torch.Tensor


class KwargsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, *, x, scale=1.0):
        return {"y": self.fc(x) * scale, "none": None}


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return Pair(h, h.sum())


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return Output(h, h.mean())


class ReturnsNone(nn.Module):
    def forward(self, x):
        return None


class CallPatterns(nn.Module):
    """A module called twice in one forward, weights tied between two layers, kwargs-only forward returning a dict,
    namedtuple and dataclass outputs, a forward returning None."""

    def __init__(self):
        super().__init__()
        self.kw = KwargsOnly()
        self.nt = TupleOut()
        self.dc = DataclassOut()
        self.none = ReturnsNone()
        self.shared = nn.Linear(8, 8)
        self.tied = nn.Linear(8, 8, bias=False)
        self.tied2 = nn.Linear(8, 8, bias=False)
        self.tied2.weight = self.tied.weight
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.kw(x=x, scale=0.5)["y"]
        o = self.nt(x)
        x = o.y + o.aux
        d = self.dc(x)
        x = d.y * d.aux
        self.none(x)
        x = self.shared(self.shared(x))
        x = self.tied2(self.tied(x))
        return self.head(x)


class TokenNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, t):
        h = self.ln(self.emb(t))
        return self.head(F.gelu(self.fc(h)) + h)


# functionals taken when this file is imported, before any collector wraps torch.nn.functional's attributes (as
# nn.TransformerEncoderLayer's default activation, F.relu, is taken when torch is imported)
_TAKEN_SOFTMAX, _TAKEN_LAYER_NORM, _TAKEN_NORMALIZE, _TAKEN_GELU = F.softmax, F.layer_norm, F.normalize, F.gelu
# two of torch's dispatchers on return_indices (boolean_dispatch)
_TAKEN_MAX_POOL1D, _TAKEN_ADAPTIVE_MAX_POOL1D = F.max_pool1d, F.adaptive_max_pool1d


class TakenFunctionals(nn.Module):
    """nn.TransformerEncoderLayer (its feed-forward's F.relu bound before the collector starts) and functionals
    called through references taken before it, beside the same functionals called through F (`F.relu`,
    `F.max_pool1d`)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.enc(x)
        h = _TAKEN_LAYER_NORM(_TAKEN_GELU(self.fc(h)), (8,))
        h = _TAKEN_NORMALIZE(h, dim=-1) + F.relu(h)
        pooled = (_TAKEN_MAX_POOL1D(h, 2) + _TAKEN_ADAPTIVE_MAX_POOL1D(h, 4, return_indices=True)[0]
                  + F.max_pool1d(h, 2, return_indices=True)[0])
        return _TAKEN_SOFTMAX(h + torch.cat([pooled, pooled], dim=-1), dim=-1)


class FirstChunk(nn.Module):
    def __init__(self, emb):
        super().__init__()
        self.emb = emb
        self.fc = nn.Linear(4, 4)

    def forward(self, t):
        return self.fc(self.emb(t))


class LastChunk(nn.Module):
    """The last chunk of a virtual pipeline, which ties its output projection to the first chunk's embedding."""

    def __init__(self, emb):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.emb = emb

    def forward(self, h):
        return self.fc(h) @ self.emb.weight.t()


def _begin(debugger, model):
    if debugger is not None:
        debugger.start(model=model)


def _end(debugger):
    if debugger is not None:
        debugger.stop()
        debugger.step()


def _loop(debugger, model, opt, batches, loss_fn, micro=1, start_model=None, between=None, inside=None):
    """`micro` forward/backward passes a step, then the optimizer; `inside(model)` runs after the passes within the
    collected window, `between(model)` after step()."""
    losses = []
    for step_batches in batches:
        _begin(debugger, start_model if start_model is not None else model)
        for b in step_batches[:micro]:
            loss = loss_fn(model, b)
            loss.backward()
            losses.append(loss.detach().clone())
        if inside is not None:
            inside(model)
        opt.step()
        opt.zero_grad()
        _end(debugger)
        if between is not None:
            between(model)
    return losses


def _mse(model, x):
    return model(x).square().mean()


def _eval_no_grad(model):
    with torch.no_grad():
        model(torch.full((2, 8), 0.5))


def _eval_inference(model):
    model.eval()
    with torch.inference_mode():
        model(torch.full((2, 8), 0.25))
    model.train()


def build(pattern):
    """(model, optimizer, batches per step, loss_fn, loop keywords) of a pattern, seeded."""
    torch.manual_seed(0)
    kw = {}
    if pattern.startswith("checkpoint"):
        model = CheckpointNet(reentrant=pattern == "checkpoint-reentrant")
        # a reentrant checkpoint needs an input that requires grad to have a backward at all
        batches = [[torch.randn(4, 8, requires_grad=model.reentrant)] for _ in range(3)]
        loss_fn = _mse
    elif pattern in ("accumulate", "eval"):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        batches = [[torch.randn(4, 8) for _ in range(3)] for _ in range(3)]
        loss_fn = _mse
        kw["micro"] = 3
        if pattern == "eval":
            kw.update(micro=1, inside=lambda m: (_eval_no_grad(m), _eval_inference(m)), between=_eval_inference)
    elif pattern == "calls":
        model = CallPatterns()
        batches = [[torch.randn(4, 8) for _ in range(2)] for _ in range(3)]
        loss_fn = _mse
        kw["micro"] = 2
    elif pattern == "autocast":
        model = TokenNet()
        batches = [[torch.randint(0, 10, (4, 6))] for _ in range(3)]

        def loss_fn(m, t):
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                logits = m(t)
            return F.cross_entropy(logits.float().view(-1, 10), t.view(-1))
    elif pattern == "taken":
        model = TakenFunctionals()
        batches = [[torch.randn(2, 3, 8)] for _ in range(3)]
        loss_fn = _mse
    elif pattern == "chunks":
        emb = nn.Embedding(10, 4)
        first, last = FirstChunk(emb), LastChunk(emb)
        model = nn.ModuleList([first, last])   # (for the optimizer and the weights' check; not a node)
        batches = [[torch.randint(0, 10, (3,))] for _ in range(3)]
        kw["start_model"] = [first, last]

        def loss_fn(m, t):
            return m[1](m[0](t)).square().mean()
    else:
        raise ValueError(pattern)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, batches, loss_fn, kw


# --- loop variants (test_loop_variants.py): training loops whose step is not _loop's, or models that are not
# build()'s. Each is `fn(debugger, steps) -> (module holding every weight trained, losses)`, seeded, and collects
# each step between start() and stop()/step() when a debugger is given.

class Mlp(nn.Module):
    def __init__(self, d=8, out=2):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(d, out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _lbfgs(debugger, steps):
    """torch.optim.LBFGS: its closure runs forward and backward several times inside one optimizer.step()."""
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3, history_size=4)
    x, y = torch.randn(6, 8), torch.randn(6, 2)
    losses = []
    for _ in range(steps):
        _begin(debugger, model)

        def closure():
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        losses.append(opt.step(closure).detach().clone())
        _end(debugger)
    return model, losses


def _scaler(debugger, steps, init_scale=2.0 ** 40, clip=True):
    """fp16 autocast on the CPU with a GradScaler whose first scale overflows the fp16 gradients: the first step
    is skipped (inf found, the scale backed off to 2**10), the later ones step. With `clip`, unscale_ and
    clip_grad_norm_ before scaler.step (else scaler.step unscales)."""
    torch.manual_seed(0)
    model = TokenNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, backoff_factor=2.0 ** -30, growth_interval=1)
    batches = [torch.randint(0, 10, (4, 6)) for _ in range(steps)]
    losses = []
    for t in batches:
        _begin(debugger, model)
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            logits = model(t)
        loss = F.cross_entropy(logits.float().view(-1, 10), t.view(-1))
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        losses.append(loss.detach().clone())
        losses.append(torch.tensor(scaler.get_scale()))
        _end(debugger)
    return model, losses


def _distill(debugger, steps, both=False):
    """Knowledge distillation: a frozen teacher in eval() under no_grad, a student trained on its soft targets;
    start(model=student), or start(model=[student, teacher])."""
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4)).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = Mlp(out=4)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(5, 8)
        _begin(debugger, [student, teacher] if both else student)
        with torch.no_grad():
            soft = F.softmax(teacher(x) / 2.0, dim=-1)
        loss = F.kl_div(F.log_softmax(student(x) / 2.0, dim=-1), soft, reduction="batchmean")
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
        _end(debugger)
    return nn.ModuleList([student, teacher]), losses


def _ema(debugger, steps):
    """An EMA copy of the model (made before the first start()), updated after each optimizer step under no_grad:
    the weights by torch._foreach_lerp_, the biases by p.lerp_."""
    import copy

    torch.manual_seed(0)
    model = Mlp()
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8)
        _begin(debugger, model)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            torch._foreach_lerp_([ema.fc1.weight, ema.fc2.weight], [model.fc1.weight, model.fc2.weight], 0.1)
            for e, p in ((ema.fc1.bias, model.fc1.bias), (ema.fc2.bias, model.fc2.bias)):
                e.lerp_(p, 0.1)
        ema(x)                       # the copy's forward: not the model given to start()
        losses.append(loss.detach().clone())
        _end(debugger)
    return nn.ModuleList([model, ema]), losses


def _optim(debugger, steps, kind):
    """Gradient clipping (clip_grad_norm_ with foreach=True, clip_grad_value_) and AdamW with foreach=True or
    fused=True on the CPU."""
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, **{kind: True})
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8)
        _begin(debugger, model)
        loss = model(x).square().mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.05)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
        _end(debugger)
    return model, losses


class PackedLstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.lstm = nn.LSTM(6, 5, batch_first=True)
        self.head = nn.Linear(5, 3)

    def forward(self, t, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(t), lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = self.lstm(packed)
        padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return self.head(padded).sum(1) + self.head(h[-1])


def _packed(debugger, steps):
    """An LSTM over a PackedSequence: the module's output is a PackedSequence (a namedtuple) and (h, c)."""
    torch.manual_seed(0)
    model = PackedLstm()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        t = torch.randint(0, 10, (3, 5))
        lengths = torch.tensor([5, 2, 4])
        _begin(debugger, model)
        loss = model(t, lengths).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
        _end(debugger)
    return model, losses


def _func(debugger, steps):
    """torch.func: functional_call of the model with its own parameters (trained), and per-sample gradients by
    vmap(grad(...)) over it, whose norms weigh the loss."""
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(4, 8), torch.randn(4, 2)
        _begin(debugger, model)
        params = dict(model.named_parameters())
        loss = F.mse_loss(functional_call(model, params, (x,)), y)
        detached = {k: v.detach() for k, v in params.items()}

        def sample_loss(p, xi, yi):
            return F.mse_loss(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
        per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(detached, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
        losses.append(per_sample["fc1.weight"].norm(dim=(1, 2)))
        _end(debugger)
    return model, losses


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, t, step):
        h = self.emb(t)
        h = self.a(h) if step % 2 == 0 else self.b(h).relu()
        return self.head(h)


def _varlen(debugger, steps):
    """Sequence length changing by step, and a forward path that differs by step (one of two layers)."""
    torch.manual_seed(0)
    model = Branchy()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [[(torch.randint(0, 10, (2, 3 + 2 * step)), step)] for step in range(steps)]

    def loss_fn(m, b):
        t, step = b
        return F.cross_entropy(m(t, step).view(-1, 10), t.view(-1))
    return model, _loop(debugger, model, opt, batches, loss_fn)


class Unregistered(nn.Module):
    """Optional submodules left None, and modules made inside forward (never registered in the model)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = None
        self.extra = None
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.fc(x)
        if self.norm is not None:
            h = self.norm(h)
        h = nn.GELU()(h)                          # a module made in forward, without parameters
        torch.manual_seed(1)
        h = h + nn.Linear(8, 8)(h)                 # one with parameters, seeded: the same in every run
        return self.head(h)


def _unregistered(debugger, steps):
    torch.manual_seed(0)
    model = Unregistered()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, _loop(debugger, model, opt, [[torch.randn(4, 8)] for _ in range(steps)], _mse)


class SparseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6, sparse=True)
        self.head = nn.Linear(6, 2)

    def forward(self, t):
        return self.head(self.emb(t).mean(1))


def _sparse(debugger, steps):
    """nn.Embedding(sparse=True) trained by SparseAdam, the dense head by Adam."""
    torch.manual_seed(0)
    model = SparseNet()
    sparse_opt = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.05)
    dense_opt = torch.optim.Adam(model.head.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        t = torch.randint(0, 20, (4, 3))
        _begin(debugger, model)
        loss = model(t).square().mean()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        losses.append(loss.detach().clone())
        _end(debugger)
    return model, losses


LOOPS = {
    "lbfgs": _lbfgs,
    "scaler": _scaler,
    "scaler-noclip": lambda d, s: _scaler(d, s, clip=False),
    "distill": _distill,
    "distill-both": lambda d, s: _distill(d, s, both=True),
    "ema": _ema,
    "adamw-foreach": lambda d, s: _optim(d, s, "foreach"),
    "adamw-fused": lambda d, s: _optim(d, s, "fused"),
    "packed-lstm": _packed,
    "func": _func,
    "varlen": _varlen,
    "unregistered": _unregistered,
    "sparse": _sparse,
}


def train(debugger, pattern, steps=2):
    if pattern in LOOPS:
        return LOOPS[pattern](debugger, steps)
    model, opt, batches, loss_fn, kw = build(pattern)
    losses = _loop(debugger, model, opt, batches[:steps], loss_fn, **kw)
    return model, losses


def config(dump_path, level, steps, summary_mode="statistics"):
    return {"task": "statistics", "dump_path": dump_path, "rank": [], "step": list(range(steps)), "level": level,
            "async_dump": False,
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}}


def main(argv):
    tool, pattern, level, dump_path = argv[:4]
    steps = int(argv[4]) if len(argv) > 4 else 2
    summary_mode = argv[5] if len(argv) > 5 else "statistics"
    cfg_path = dump_path.rstrip("/") + "_config.json"
    os.makedirs(os.path.dirname(os.path.abspath(cfg_path)), exist_ok=True)
    with open(cfg_path, "w") as f:
        json.dump(config(dump_path, level, steps, summary_mode), f)
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from tbprobe import PrecisionDebugger
    debugger = PrecisionDebugger(config_path=cfg_path)
    train(debugger, pattern, steps)
    if hasattr(debugger, "close"):
        debugger.close()


if __name__ == "__main__":
    main(sys.argv[1:])
