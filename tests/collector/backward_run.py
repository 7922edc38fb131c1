"""One training step whose backward pass runs Python: activation checkpointing (reentrant or not) and a custom
autograd Function whose backward calls torch (in loss.backward() and in a torch.autograd.grad after it), under a
collector (tbprobe or msprobe). Prints {name: parent} of the
step's records (construct.json's parents, None for a call at the top) as JSON, then the loss and the first
weight's gradient sum. test_backward_pass.py runs it with both tools.

usage: backward_run.py TOOL LEVEL REENTRANT(0|1) DUMP_PATH [none]   ("none": no collector)
"""
import json
import logging
import os
import sys
import warnings

import torch
import torch.nn as nn
from runner_config import collector  # (this script's folder is on sys.path)
from torch.utils.checkpoint import checkpoint


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return torch.sin(grad) + grad   # torch calls inside a backward: recorded as the reference records them


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.act(self.fc(x)) * 2


class Net(nn.Module):
    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=self.reentrant)
        return self.head(Scale.apply(x))


def main() -> None:
    tool, level, reentrant, dump_path = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    plain = len(sys.argv) > 5 and sys.argv[5] == "none"
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = Net(reentrant)
    x = torch.randn(4, 8, requires_grad=reentrant)
    debugger = None
    if not plain:
        debugger = collector(tool, os.path.join(dump_path, "config.json"), dump_path, level)
        debugger.start(model=model)
    loss = model(x).sum()
    if level == "L1":
        torch.autograd.backward([loss])
    else:
        loss.backward()
    # torch.autograd.grad, as a gradient penalty calls it: the custom Function's backward runs inside it
    (gx,) = torch.autograd.grad(Scale.apply(model.blocks[0].fc.weight).sum(), [model.blocks[0].fc.weight])
    if debugger is not None:
        debugger.stop()
        debugger.step()
    records = {}
    for root, _, files in os.walk(dump_path):
        if "dump.json" in files and not plain:
            with open(os.path.join(root, "dump.json")) as f:
                names = list(json.load(f)["data"])
            with open(os.path.join(root, "construct.json")) as f:
                parents = json.load(f)
            records = {n: parents.get(n) for n in names}
    print(json.dumps(records))
    print(json.dumps([loss.item(), model.blocks[0].fc.weight.grad.sum().item(), gx.sum().item()]))


if __name__ == "__main__":
    main()
