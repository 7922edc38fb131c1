"""Train a small GPT on random tokens with tbprobe's collector switched on.

    python examples/train_gpt.py --dump-path out/debug --level mix --steps 2 --perturb 0.05
    python examples/train_gpt.py --dump-path out/bench --level mix --steps 2

The model uses scaled_dot_product_attention, LayerNorm, dropout, GELU and in-place ops, so the dump shows every
kind of node. `--perturb` adds a constant to one weight so that a "debug" run diverges from a clean "bench" run.
`--tool msprobe` runs the same loop under the reference collector (for side-by-side comparisons); `--tool none`
runs it with no tool at all.
"""
import argparse
import json
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, dim: int, dropout: float):
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc(x))
        h = self.out(h)
        h.mul_(1.0)  # an in-place op on an intermediate tensor
        return self.drop(h)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, ctx: int = 16,
                 dropout: float = 0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_batch(step: int, batch: int, ctx: int, vocab: int):
    gen = torch.Generator().manual_seed(1000 + step)
    data = torch.randint(0, vocab, (batch, ctx + 1), generator=gen)
    return data[:, :-1], data[:, 1:]


def make_debugger(tool: str, dump_path: str, level: str, steps: int, summary_mode: str):
    if tool == "none":
        return None
    config = {"task": "statistics", "dump_path": dump_path, "rank": [], "step": list(range(steps)), "level": level,
              "async_dump": False,
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from tbprobe import PrecisionDebugger
    return PrecisionDebugger(config_path=path)


def seed(tool: str, value: int) -> None:
    if tool == "msprobe":
        from msprobe.pytorch import seed_all
    else:
        from tbprobe import seed_all
    seed_all(value, mode=True)


def common_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every example training script takes (train_llama.py too)."""
    p.add_argument("--dump-path", default="./tbprobe_dump")
    p.add_argument("--level", default="L0", choices=["L0", "L1", "mix"])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--summary-mode", default="statistics", choices=["statistics", "md5", "xor"])
    p.add_argument("--tool", default="tbprobe", choices=["tbprobe", "msprobe", "none"])
    return p


def seed_run(args) -> None:
    if args.tool == "none":
        torch.manual_seed(args.seed)
    else:
        seed(args.tool, args.seed)


def train(model: nn.Module, opt: torch.optim.Optimizer, args, clip_norm: float = 0.0) -> list:
    """args.steps training steps on random tokens, each collected by args.tool; clip_norm > 0 clips the gradients'
    norm before each optimizer step. Returns the losses."""
    debugger = make_debugger(args.tool, args.dump_path, args.level, args.steps, args.summary_mode)
    losses = []
    for step in range(args.steps):
        x, y = make_batch(step, batch=4, ctx=16, vocab=64)
        if debugger is not None:
            debugger.start(model=model)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
        print(f"step {step} loss {loss.item():.6f}")
    return losses


def main(argv=None) -> list:
    p = common_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--perturb", type=float, default=0.0,
                   help="add this to column 0 of the last block's mlp.fc.weight (a 'debug' run that diverges)")
    p.add_argument("--dim", type=int, default=32)
    args = p.parse_args(argv)

    seed_run(args)
    model = GPT(dim=args.dim)
    if args.perturb:
        with torch.no_grad():
            # one input column: a constant added to every weight would vanish behind the LayerNorm before it
            model.blocks[-1].mlp.fc.weight[:, 0].add_(args.perturb)
    return train(model, torch.optim.SGD(model.parameters(), lr=0.05), args)


if __name__ == "__main__":
    main()
