"""Step-time overhead of the training monitor on a d=256 transformer, tbprobe beside the reference.

Default config: the norm of every weight gradient and the activations (inputs, outputs and their gradients) of
every block, plus the embedding and the head. Each tool runs in its own process (the reference in its own venv):
two copies of the same model train side by side, one with the monitor, in alternating order; the median of the
per-pair step-time ratios is the overhead.

    .venv/bin/python bench/monitor_overhead.py [--quick] [--steps N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER_PY = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "python")
D, LAYERS, HEADS, SEQ, BATCH, VOCAB = 256, 4, 4, 128, 8, 1000


def _model():
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(D)
            self.attn = torch.nn.MultiheadAttention(D, HEADS, batch_first=True)
            self.ln2 = torch.nn.LayerNorm(D)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, D)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(LAYERS)])
            self.head = torch.nn.Linear(D, VOCAB)

        def forward(self, ids):
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return Net()


def _config(out_dir: str) -> dict:
    targets = {f"blocks.{i}": {} for i in range(LAYERS)}
    targets.update({"embed": {}, "head": {}})
    return {"targets": targets, "xy_distribution": True, "wg_distribution": True, "ops": ["norm"],
            "output_dir": out_dir}


def worker(tool: str, steps: int, warmup: int) -> dict:
    """Runs in the tool's own interpreter. Two copies of the same model train side by side, one without a monitor
    and one with it, in alternating order (A B, B A, ...): on a shared, noisy machine both see the same load, and
    the per-pair ratio isolates the monitor's cost."""
    import torch

    torch.set_num_threads(2)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g) for _ in range(4)]
    pairs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = _model()
        pairs.append((model, torch.optim.AdamW(model.parameters(), lr=1e-4)))

    def one(k, i):
        model, opt = pairs[k]
        ids = batches[i % len(batches)]
        t0 = time.perf_counter()
        loss = loss_fn(model(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    tmp = tempfile.mkdtemp(prefix=f"monbench_{tool}_")
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(_config(os.path.join(tmp, "out")), f)
    os.environ["MONITOR_OUTPUT_DIR"] = os.path.join(tmp, "out")
    if tool == "tbprobe":
        sys.path.insert(0, ROOT)
        from tbprobe import TrainerMon
    else:
        from msprobe.pytorch import TrainerMon
    mon = TrainerMon(cfg_path, params_have_main_grad=False)
    mon.set_monitor(pairs[1][0], pairs[1][1])
    for i in range(warmup):
        one(0, i), one(1, i)
    base, monitored = [], []
    for i in range(steps):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for k in order:
            (base if k == 0 else monitored).append(one(k, i))
    if hasattr(mon, "close"):
        mon.close()
    return {"base": base, "monitored": monitored}


def _spawn(python: str, tool: str, steps: int, warmup: int) -> dict:
    cmd = [python, os.path.abspath(__file__), "--worker", tool, "--steps", str(steps), "--warmup", str(warmup)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env, cwd=ROOT)
    if res.returncode != 0:
        raise RuntimeError(f"{tool} worker failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--worker", choices=["tbprobe", "reference"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (6 if args.quick else 30)
    if args.worker:
        print(json.dumps(worker(args.worker, steps, args.warmup)))
        return 0
    results = {"tbprobe": _spawn(sys.executable, "tbprobe", steps, args.warmup)}
    if os.path.exists(PEER_PY):
        results["reference"] = _spawn(PEER_PY, "reference", steps, args.warmup)
    else:
        print("reference monitor not installed (run ../shared/peers/setup.sh): tbprobe only")
    print(f"d={D} transformer, {LAYERS} blocks, batch {BATCH}x{SEQ}, AdamW, CPU; {steps} steps per phase, "
          "medians; config: norm of every weight gradient + activations of every block, embed and head")
    print(f"{'tool':<12}{'no monitor (ms)':>17}{'monitored (ms)':>16}{'overhead':>10}")
    overhead = {}
    for tool, r in results.items():
        b, m = statistics.median(r["base"]) * 1e3, statistics.median(r["monitored"]) * 1e3
        # the median of per-pair ratios: each pair ran back to back under the same machine load
        overhead[tool] = statistics.median(mm / bb for bb, mm in zip(r["base"], r["monitored"])) - 1
        print(f"{tool:<12}{b:>17.1f}{m:>16.1f}{overhead[tool]:>+10.1%}")
    if "reference" in overhead and overhead["reference"] > 0:
        print(f"tbprobe overhead / reference overhead: {overhead['tbprobe'] / overhead['reference']:.2f}")
    print(f"target: tbprobe <= +5.0%: {'met' if overhead['tbprobe'] <= 0.05 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
