"""Two module backward cases under a collector (tbprobe or msprobe), for test_module_backward.py:

- inner: a value a module INSIDE the recorded module keeps in an attribute (`self.inner.aux`), added to the loss
  by the caller: part of the outer module's share of its input's gradient;
- twice: a module returning one tensor at two positions (`return y, y`), each position used with its own weight.

Prints the step's backward records in dump.json's order as JSON ([name, input norms, output norms], None for a
null item), then the loss and every parameter gradient's sum as exact floats (hex), so a run without a collector
("none") says whether the training's numbers are the same bit for bit.

usage: module_backward_run.py TOOL CASE DUMP_PATH [none]
"""
import json
import logging
import os
import sys
import warnings

import torch
import torch.nn as nn
from runner_config import collector  # (this script's folder is on sys.path)


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return y, y


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.gate = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, h):
        self.aux = self.gate(h).pow(2).mean()
        return self.fc(h)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, h):
        return self.inner(h) * 2


class Net(nn.Module):
    def __init__(self, case):
        super().__init__()
        self.case = case
        self.emb, self.twice, self.outer = nn.Linear(4, 4), Twice(), Outer()

    def forward(self, x):
        h = self.emb(x)
        if self.case == "twice":
            a, b = self.twice(h)
            return (a * 2).sum() + (b * 3).sum() + (a * b).sum()
        return self.outer(h).sum() + self.outer.inner.aux


def main() -> None:
    tool, case, dump_path = sys.argv[1], sys.argv[2], sys.argv[3]
    plain = len(sys.argv) > 4 and sys.argv[4] == "none"
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = Net(case)
    x = torch.randn(3, 4)
    debugger = None
    if not plain:
        debugger = collector(tool, os.path.join(dump_path, "config.json"), dump_path, "L0")
        debugger.start(model=model)
    loss = model(x)
    loss.backward()
    if debugger is not None:
        debugger.stop()
        debugger.step()
    records = []
    for root, _, files in os.walk(dump_path):
        if "dump.json" in files and not plain:
            with open(os.path.join(root, "dump.json")) as f:
                data = json.load(f)["data"]
            for name, rec in data.items():
                if ".backward." in name:
                    records.append([name] + [[i and i["Norm"] for i in rec.get(k, [])] for k in ("input", "output")])
    print(json.dumps(records))
    print(json.dumps([loss.item().hex()] + [p.grad.sum().item().hex() for p in model.parameters()
                                            if p.grad is not None]))


if __name__ == "__main__":
    main()
