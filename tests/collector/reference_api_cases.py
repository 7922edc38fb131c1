"""The reference's calls beyond start/stop/step, run under msprobe or tbprobe (test_reference_api.py).

    python reference_api_cases.py {msprobe|tbprobe} CASE OUT_DIR    prints {"rank_dir": ..., "names": [...]} as JSON

CASE: custom (register_custom_api / restore_custom_api; custom_l0: at L0, inside and outside a model's modules),
module_dump (module_dump / module_dump_end at L1),
tokens (start(model, token_range=[1, 2]) in an inference loop at mix), rank (start(rank_id=3) without
torch.distributed).
"""
import json
import os
import sys
import types

import torch
import torch.nn as nn


def _config(out: str, level: str) -> str:
    cfg = {"task": "statistics", "dump_path": out, "rank": [], "step": [0], "level": level, "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    path = out.rstrip("/") + "_config.json"
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def fused_op(x, scale=2.0):
    return torch.relu(x) * scale + 1


def run(tool: str, case: str, out: str) -> dict:
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger, module_dump, module_dump_end
    else:
        from tbprobe import PrecisionDebugger, module_dump, module_dump_end
    torch.manual_seed(0)
    level = {"custom": "L1", "custom_l0": "L0", "module_dump": "L1", "tokens": "mix", "rank": "L1"}[case]
    dbg = PrecisionDebugger(config_path=_config(out, level))
    extra = {}
    if case == "custom":
        lib = types.ModuleType("mylib")
        lib.fused_op = fused_op
        dbg.register_custom_api(lib, "fused_op")
        x = torch.randn(3, requires_grad=True)
        dbg.start()
        lib.fused_op(lib.fused_op(x, scale=3.0)).sum().backward()
        dbg.stop()
        dbg.step()
        dbg.restore_custom_api(lib, "fused_op")
        extra["restored"] = lib.fused_op is fused_op
    elif case == "custom_l0":
        lib = types.ModuleType("mylib")
        lib.fused_op = fused_op
        dbg.register_custom_api(lib, "fused_op")
        a, b = nn.Linear(3, 3), nn.Linear(3, 3)
        model = nn.Sequential(a, b)
        model.forward = lambda x: b(lib.fused_op(a(x), scale=3.0))
        dbg.start(model)
        lib.fused_op(model(torch.randn(2, 3))).sum().backward()
        dbg.stop()
        dbg.step()
    elif case == "module_dump":
        a, block, b = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2)
        dbg.start()
        h = a(torch.randn(3, 4))
        module_dump(block, "block")
        h = block(h)
        module_dump_end()
        b(h).sum().backward()
        dbg.stop()
        dbg.step()
    elif case == "tokens":
        model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        x = torch.randn(1, 4)
        dbg.start(model=model, token_range=[1, 2])
        with torch.no_grad():
            for _ in range(5):
                x = model(x) + 0.0
        dbg.stop()
        dbg.step()
    elif case == "rank":
        dbg.start(rank_id=3)
        torch.randn(2).sum()
        dbg.stop()
        dbg.step()
    (rank_dir,) = os.listdir(os.path.join(out, "step0"))
    with open(os.path.join(out, "step0", rank_dir, "dump.json")) as f:
        names = list(json.load(f)["data"])
    # (a proc<pid> folder differs between two processes by its pid alone)
    return dict(extra, rank_dir=rank_dir if rank_dir.startswith("rank") else "proc<pid>", names=names)


if __name__ == "__main__":
    print(json.dumps(run(*sys.argv[1:4])))
