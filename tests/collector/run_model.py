"""Train one small model for a few steps under a collector (tbprobe or msprobe); used by the tests and to make
the golden node sets (run with the msprobe peer's python: `python run_model.py msprobe gpt mix OUT`).

usage: run_model.py TOOL MODEL LEVEL DUMP_PATH [SUMMARY_MODE] [STEPS] [TASK] [BLOCK_JSON]
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

from train_gpt import GPT, make_batch  # noqa: E402
from train_hf import HFCausalLM  # noqa: E402
from train_llama import Llama  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class CopyToRegion(torch.autograd.Function):
    """A tensor-parallel copy-to-region as Megatron writes it: the forward returns its input as it is (autograd
    makes a view of it), the backward would all-reduce the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.3)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return F.linear(CopyToRegion.apply(x), self.weight, self.bias)


class TPNet(nn.Module):
    """Column-parallel layers through a custom Function, and a user's full backward hook (whose own custom Function,
    BackwardHookFunction, returns its inputs as they are too)."""

    def __init__(self):
        super().__init__()
        self.fc1 = ColumnLinear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = ColumnLinear(16, 4)
        self.act.register_full_backward_hook(lambda module, grad_in, grad_out: None)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.conv1(x))))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


def build(model_name: str):
    torch.manual_seed(0)
    if model_name == "mlp":
        model = MLP()
        data = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(4)]
        loss_fn = F.mse_loss
    elif model_name == "tp":
        model = TPNet()
        data = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(4)]
        loss_fn = F.mse_loss
    elif model_name == "conv":
        model = ConvNet()
        data = [(torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))) for _ in range(4)]
        loss_fn = F.cross_entropy
    elif model_name in ("gpt", "gpt_dropout"):
        model = GPT(dropout=0.0 if model_name == "gpt" else 0.1)   # dropout: the collector must not use the RNG
        data = [make_batch(i, 2, 16, 64) for i in range(4)]

        def loss_fn(logits, y):
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
    elif model_name == "llama" or model_name.startswith("hf-"):
        # many operators per module, kwargs-only calls, no-op conversions (x.float() of a float32 x); transformers'
        # own models (hf-<arch>, examples/train_hf.py's ARCHS) also build their attention masks under torch.vmap
        # (they need scripts/hf_deps.sh)
        model = Llama() if model_name == "llama" else HFCausalLM(model_name[3:])
        data = [make_batch(i, 2, 16, 64) for i in range(4)]

        def loss_fn(logits, y):
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
    elif model_name == "chunks":
        # a list of model chunks (a virtual pipeline's): start(model=[...]) names them Module.<i>.<path>
        model = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()),
                 torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))]
        data = [(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(4)]
        loss_fn = F.mse_loss
    else:
        raise SystemExit(f"unknown model {model_name}")
    return model, data, loss_fn


def _chained(chunks):
    def forward(x):
        for chunk in chunks:
            x = chunk(x)
        return x

    return forward


def collected_step(debugger, model, opt, loss_fn, x, y, forward=None, clip=False):
    """One optimizer step between debugger.start and debugger.stop (no debugger: the plain step); step() is the
    caller's. `forward` runs the model (default: the model itself; e.g. torch.compile(model)); `clip`: clip the
    gradients' norm before the step, as LLM training loops do. Returns the loss."""
    if debugger is not None:
        debugger.start(model=model)
    loss = loss_fn((model if forward is None else forward)(x), y)
    opt.zero_grad()
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if debugger is not None:
        debugger.stop()
    return loss


def train(debugger, model_name: str, steps: int):
    model, data, loss_fn = build(model_name)
    chunks = model if isinstance(model, list) else [model]
    params = [p for m in chunks for p in m.parameters()]
    # the Llama trains as LLMs do, with AdamW (whose step count is a 0-dim tensor changed in place) and clipping
    llm = model_name == "llama" or model_name.startswith("hf-")
    opt = torch.optim.AdamW(params, lr=1e-3) if llm else torch.optim.SGD(params, lr=0.1)
    forward = _chained(model) if isinstance(model, list) else None
    losses = []
    for step in range(steps):
        loss = collected_step(debugger, model, opt, loss_fn, *data[step % len(data)], forward=forward,
                              clip=llm)
        if debugger is not None:
            debugger.step()
        losses.append(loss.detach().clone())
    return model, losses


def config(dump_path: str, level: str, summary_mode: str = "statistics", steps: int = 1, task: str = "statistics"):
    cfg = {"task": task, "dump_path": dump_path, "rank": [], "step": list(range(steps)), "level": level,
           "async_dump": False}
    if task == "statistics":
        cfg["statistics"] = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}
    return cfg


def main(argv):
    tool, model_name, level, dump_path = argv[:4]
    summary_mode = argv[4] if len(argv) > 4 else "statistics"
    steps = int(argv[5]) if len(argv) > 5 else 1
    task = argv[6] if len(argv) > 6 else "statistics"
    block = json.loads(argv[7]) if len(argv) > 7 else {}   # more keys of the task block (scope, list ...)
    cfg_path = dump_path.rstrip("/") + "_config.json"
    os.makedirs(os.path.dirname(os.path.abspath(cfg_path)), exist_ok=True)
    with open(cfg_path, "w") as f:
        cfg = config(dump_path, level, summary_mode, steps, task)
        cfg.setdefault(task, {}).update(block)
        json.dump(cfg, f)
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from tbprobe import PrecisionDebugger
    train(PrecisionDebugger(config_path=cfg_path), model_name, steps)


if __name__ == "__main__":
    main(sys.argv[1:])
