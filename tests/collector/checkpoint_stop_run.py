"""A non-reentrant checkpoint whose recomputation stops inside a module with parameters (each block ends in a
Linear, so the recomputation stops in it), collected at L0 by tbprobe or msprobe. Prints the dump.json records
of the blocks' modules as JSON.

usage: checkpoint_stop_run.py TOOL DUMP_PATH
"""
import glob
import json
import logging
import os
import sys
import warnings

import torch
import torch.nn as nn
from runner_config import collector  # (this script's folder is on sys.path)
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(self.act(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(x)


def main() -> None:
    tool, dump_path = sys.argv[1], sys.argv[2]
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = Net()
    debugger = collector(tool, os.path.join(dump_path, "config.json"), dump_path, "L0")
    debugger.start(model=model)
    model(torch.randn(4, 8)).sum().backward()
    debugger.stop()
    debugger.step()
    (path,) = glob.glob(os.path.join(dump_path, "**", "dump.json"), recursive=True)
    with open(path) as f:
        data = json.load(f)["data"]
    print(json.dumps({k: v for k, v in data.items() if k.startswith("Module.blocks.")}))


if __name__ == "__main__":
    main()
