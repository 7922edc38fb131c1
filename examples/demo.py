"""The README demo (`make demo`): train a small GPT twice, a "debug" run with one weight perturbed and a clean
"bench" run, each with the collector (level mix) and the training monitor on; then build the compare graph of
the two runs. Everything lands under one folder that `tensorboard --logdir` serves:

    demo_out/dumps/{debug,bench}/step*/proc<pid>/  the collector's dumps (rank<R>/ under torch.distributed)
    demo_out/dumps/{debug,bench}_tb/               the collector's live build graph and health scalars
    demo_out/monitor/{debug,bench}/rank0/          the monitor's event files (GRAPH_ASCEND -> Monitor, SCALARS)
    demo_out/compare/compare_<ts>.vis.db         the compare graph (GRAPH_ASCEND -> Graph / Compare / Overflow)

    python examples/demo.py --out demo_out
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

PERTURB = 1.0  # added to one input column of blocks.1.mlp.fc.weight in the debug run
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def train(name: str, out: str, steps: int, collect_steps: int, perturb: float) -> None:
    """One run: the collector records the first `collect_steps` steps, the monitor follows every step."""
    import torch
    import torch.nn.functional as F
    from train_gpt import GPT, make_batch

    from tbprobe import PrecisionDebugger, TrainerMon, seed_all

    seed_all(1234, mode=True)
    model = GPT(dim=32)
    if perturb:
        with torch.no_grad():
            # One input column: a uniform shift of the whole weight would vanish behind the LayerNorm before it.
            model.blocks[-1].mlp.fc.weight[:, 0].add_(perturb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    monitor_dir = os.path.join(out, "monitor", name)
    os.makedirs(monitor_dir, exist_ok=True)
    monitor_config = {
        "targets": {"blocks.0": {}, "blocks.1": {}, "tok": {}, "head": {}},
        "xy_distribution": True,
        "wg_distribution": True,
        "mv_distribution": True,
        "ops": ["min", "max", "mean", "norm", "nans"],
        "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0, "ops": ["norm"]}}]},
        "output_dir": monitor_dir,
    }
    config_path = os.path.join(monitor_dir, "monitor_config.json")
    with open(config_path, "w") as f:
        json.dump(monitor_config, f, indent=2)
    monitor = TrainerMon(config_path)
    monitor.set_monitor(model, optimizer)

    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=os.path.join(out, "dumps", name),
                                 step=list(range(collect_steps)))
    for step in range(steps):
        x, y = make_batch(step, batch=4, ctx=16, vocab=64)
        debugger.start(model=model)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        debugger.stop()
        debugger.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"[{name}] step {step:3d} loss {loss.item():.5f}", flush=True)
    monitor.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="demo_out", help="output folder (the TensorBoard log directory)")
    parser.add_argument("--steps", type=int, default=40, help="training steps per run (the monitor sees all)")
    parser.add_argument("--collect-steps", type=int, default=2, help="steps the collector records")
    parser.add_argument("--train", choices=["debug", "bench"], help=argparse.SUPPRESS)  # one run, in a child
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)

    if args.train:
        train(args.train, out, args.steps, args.collect_steps, perturb=PERTURB if args.train == "debug" else 0.0)
        return 0

    started = time.monotonic()
    # A second `make demo` starts afresh instead of mixing its dumps with the last one's.
    for sub in ("dumps", "monitor", "compare"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    # Each run in its own process, as a user's two trainings would be: the collector hooks process-wide state.
    for name in ("debug", "bench"):
        subprocess.run([sys.executable, os.path.abspath(__file__), "--out", out, "--steps", str(args.steps),
                        "--collect-steps", str(args.collect_steps), "--train", name], check=True)

    from tbprobe.graph_builder import run_graph

    result = run_graph(os.path.join(out, "dumps", "debug"), os.path.join(out, "dumps", "bench"),
                       os.path.join(out, "compare"), overflow_check=True)
    print(result.summary_text())
    print(f"demo ready in {time.monotonic() - started:.0f} s under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
