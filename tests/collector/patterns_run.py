"""Small training loops in the patterns real users write (activation checkpointing, gradient accumulation, eval
passes inside a step, modules returning dicts/namedtuples/dataclasses/None, shared modules, bf16 autocast, model
chunks that share a module), each trainable with tbprobe, msprobe or no collector; used by
test_training_patterns.py, and run with the msprobe peer's python to compare the node sets:

usage: patterns_run.py TOOL PATTERN LEVEL DUMP_PATH [STEPS]      (TOOL: tbprobe | msprobe)
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


def _loop(debugger, model, opt, batches, loss_fn, micro=1, start_model=None, between=None, inside=None):
    """`micro` forward/backward passes a step, then the optimizer; `inside(model)` runs after the passes within the
    collected window, `between(model)` after step()."""
    losses = []
    for step_batches in batches:
        if debugger is not None:
            debugger.start(model=start_model if start_model is not None else model)
        for b in step_batches[:micro]:
            loss = loss_fn(model, b)
            loss.backward()
            losses.append(loss.detach().clone())
        if inside is not None:
            inside(model)
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
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


def train(debugger, pattern, steps=2):
    model, opt, batches, loss_fn, kw = build(pattern)
    losses = _loop(debugger, model, opt, batches[:steps], loss_fn, **kw)
    return model, losses


def config(dump_path, level, steps):
    return {"task": "statistics", "dump_path": dump_path, "rank": [], "step": list(range(steps)), "level": level,
            "async_dump": False,
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}


def main(argv):
    tool, pattern, level, dump_path = argv[:4]
    steps = int(argv[4]) if len(argv) > 4 else 2
    cfg_path = dump_path.rstrip("/") + "_config.json"
    os.makedirs(os.path.dirname(os.path.abspath(cfg_path)), exist_ok=True)
    with open(cfg_path, "w") as f:
        json.dump(config(dump_path, level, steps), f)
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
