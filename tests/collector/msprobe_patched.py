"""Print, as JSON, the torch functions msprobe patches at L1: {"Tensor": [names], "Torch": [...], "Functional":
[...], "linalg": [...]}. Run with the msprobe peer's python (test_api_coverage.py).

usage: msprobe_patched.py DUMP_PATH
"""
import json
import logging
import os
import sys

import torch
import torch.nn.functional as F


def main() -> None:
    logging.disable(logging.CRITICAL)
    spaces = {"Tensor": torch.Tensor, "Torch": torch, "Functional": F, "linalg": torch.linalg}
    before = {k: {n: getattr(o, n, None) for n in dir(o)} for k, o in spaces.items()}
    from msprobe.pytorch import PrecisionDebugger

    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cfg = os.path.join(out, "config.json")
    with open(cfg, "w") as f:
        json.dump({"task": "statistics", "dump_path": out, "rank": [], "step": [], "level": "L1",
                   "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}, f)
    debugger = PrecisionDebugger(config_path=cfg)
    debugger.start(model=torch.nn.Linear(2, 2))
    patched = {}
    for k, o in spaces.items():
        # (callables only: importing msprobe also sets module attributes such as torch.onnx)
        # (!=, not `is not`: a classmethod read twice gives two equal bound methods)
        patched[k] = sorted(n for n in dir(o) if getattr(o, n, None) != before[k].get(n)
                            and before[k].get(n) is not None and callable(before[k][n])
                            and not isinstance(before[k][n], type))
    debugger.stop()
    print(json.dumps(patched))


if __name__ == "__main__":
    main()
