"""Collector overhead: the same training loop with no tool, with msprobe and with tbprobe, in one run.

    .venv/bin/python bench/collector_overhead.py [--quick] [--repeat 3] [--msprobe-python /tmp/peers/msprobe/bin/python]

Each tool runs in a fresh subprocess (msprobe patches torch globally). Step time = median CPU time of the whole
process (training and writer threads) per step over the measured steps, after warm-up, with the collector dumping
every measured step; CPU time is used because wall time on a shared 2-core machine is mostly noise. Each process
first runs the same number of steps with no tool (before the tool is imported) and every ratio is taken within one
process: this machine's speed drifts by up to 2x over seconds, so a no-tool step measured a second before the tool
is a steadier reference than one measured in another process. Prints step-time ratios against no tool and
tbprobe's added time as a fraction of msprobe's.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_PYTHON = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "python")

SMALL = {"dim": 32, "layers": 2, "ctx": 16, "batch": 4}
LARGE = {"dim": 256, "layers": 2, "ctx": 64, "batch": 8}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def gpt_training(shape: dict):
    """The benchmarks' model (examples/train_gpt.py's GPT, one thread, seeded) and its training step:
    (model, train_step), train_step() being one untimed SGD step on a fixed batch of random tokens."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import torch.nn.functional as F
    from train_gpt import GPT

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(dim=shape["dim"], heads=4, layers=shape["layers"], ctx=shape["ctx"], dropout=0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, 64, (shape["batch"], shape["ctx"] + 1), generator=gen)
    x, y = data[:, :-1], data[:, 1:]

    def train_step() -> None:
        loss = F.cross_entropy(model(x).view(-1, 64), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return model, train_step


def worker(tool: str, level: str, mode: str, shape: dict, warmup: int, steps: int, started: bool) -> dict:
    model, train_step = gpt_training(shape)

    def plain_step() -> float:
        t0 = time.process_time()
        train_step()
        return time.process_time() - t0

    own_base = [plain_step() for _ in range(warmup + steps)][warmup:]   # this process's no-tool steps, first
    tmp = tempfile.mkdtemp(prefix=f"bench_{tool}_")
    debugger = None
    if tool != "none":
        cfg = {"task": "statistics", "dump_path": os.path.join(tmp, "dump"), "rank": [],
               "step": list(range(warmup + steps)), "level": level, "async_dump": False,
               "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": mode}}
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        if tool == "msprobe":
            from msprobe.pytorch import PrecisionDebugger
        else:
            sys.path.insert(0, ROOT)
            from tbprobe import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=path)
    times, rss = [], []
    # the cyclic GC's time over the measured steps: a tool's records that outlive a young collection are promoted,
    # and full collections (a walk over every object torch's import made) follow; the median step hides them
    gc_time, gc_full, gc_start = [0.0], [0], [0.0]

    def on_gc(phase, info):
        if phase == "start":
            gc_start[0] = time.process_time()
        elif len(times) >= warmup:
            gc_time[0] += time.process_time() - gc_start[0]
            gc_full[0] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    objects_first = len(gc.get_objects())
    for _step in range(warmup + steps):
        t0 = time.process_time()
        if debugger is not None and started:
            debugger.start(model=model)
        train_step()
        if debugger is not None and started:
            debugger.stop()
            debugger.step()
        times.append(time.process_time() - t0)
        rss.append(_rss_mb())
        if _step == warmup - 1:
            objects_first = len(gc.get_objects())   # (outside the clock) a leak shows here before it shows in RSS
    objects_last = len(gc.get_objects())
    gc.callbacks.remove(on_gc)
    if debugger is not None and hasattr(debugger, "close"):
        debugger.close()
    # the writer thread's remaining work belongs to the measured steps too
    return {"step_s": statistics.median(times[warmup:]), "base_s": statistics.median(own_base), "rss_first": rss[min(warmup, len(rss) - 1)],
            "rss_last": rss[-1], "mean_s": statistics.fmean(times[warmup:]), "gc_s": gc_time[0] / steps,
            "gc_full": gc_full[0], "objects_first": objects_first, "objects_last": objects_last}


def run(python: str, tool: str, level: str, mode: str, shape: str, warmup: int, steps: int,
        started: bool = True) -> dict:
    cmd = [python, os.path.abspath(__file__), "--worker", tool, level, mode, shape, str(warmup), str(steps),
           "1" if started else "0"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--msprobe-python", default=PEER_PYTHON)
    p.add_argument("--repeat", type=int, default=1,
                   help="run every case N times, interleaved, and report the median ratio (this machine is noisy)")
    p.add_argument("--only", action="append", metavar="CASE",
                   help='run only this case, e.g. "small L0 statistics" (repeatable); skips the idle and memory runs')
    p.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        tool, level, mode, shape, warmup, steps, started = args.worker
        out = worker(tool, level, mode, SMALL if shape == "small" else LARGE, int(warmup), int(steps), started == "1")
        print(json.dumps(out))
        return
    ours = sys.executable
    have_ms = os.path.exists(args.msprobe_python)
    n_small, n_large = (8, 3) if args.quick else (20, 6)
    cases = cases_all = [("small", "L0", "statistics"), ("small", "L1", "statistics"), ("small", "mix", "statistics"),
             ("small", "L1", "md5"), ("large", "L1", "statistics")]
    if args.only:
        wanted = {" ".join(c.split()) for c in args.only}
        cases = [c for c in cases if " ".join(c) in wanted]
        if not cases:
            p.error(f"--only: no such case (cases: {', '.join(' '.join(c) for c in cases_all)})")
    print(f"{'case':<22} {'no tool ms':>10} {'msprobe ms':>11} {'ratio':>7} {'tbprobe ms':>11} {'ratio':>7}"
          f" {'added tb/ms':>11}")
    rows = []
    for shape, level, mode in cases:
        n = n_small if shape == "small" else n_large
        trials = []
        for _ in range(max(1, args.repeat)):
            tb = run(ours, "tbprobe", level, mode, shape, 3, n)
            ms = run(args.msprobe_python, "msprobe", level, mode, shape, 3, n) if have_ms else {"error": "absent"}
            if "step_s" not in tb:
                raise SystemExit(f"tbprobe run failed: {tb.get('error')}")
            trials.append((tb, ms))
        # the trial whose tbprobe/no-tool ratio is the median of the trials: one consistent run per row
        trials.sort(key=lambda tr: tr[0]["step_s"] / tr[0]["base_s"])
        tb, ms = trials[len(trials) // 2]
        b, t = tb["base_s"], tb["step_s"]
        m_ratio = ms["step_s"] / ms["base_s"] if "step_s" in ms else float("nan")
        ms_added = ms["step_s"] - ms["base_s"] if "step_s" in ms else float("nan")
        frac = (t - b) / ms_added if ms_added > 0 else float("nan")
        name = f"{shape} {level} {mode}"
        print(f"{name:<22} {b * 1e3:>10.2f} {ms.get('step_s', float('nan')) * 1e3:>11.2f} {m_ratio:>6.2f}x"
              f" {t * 1e3:>11.2f} {t / b:>6.2f}x {frac:>11.3f}")
        rows.append((name, b, ms.get("step_s"), t))
    if args.only:
        return
    # created but not started, and memory over many steps
    n_idle = 40 if args.quick else 100
    idle_ratios = []
    for _ in range(max(5, args.repeat)):   # the effect is nil by construction: many trials against the noise
        idle = run(ours, "tbprobe", "L1", "statistics", "small", 5, n_idle, started=False)
        idle_ratios.append(idle["step_s"] / idle["base_s"])
    print(f"\nnot started: {statistics.median(idle_ratios):.3f}x of no tool"
          + (f" (median of {', '.join(f'{r:.3f}' for r in sorted(idle_ratios))})" if len(idle_ratios) > 1 else ""))
    n_mem = 60 if args.quick else 200
    mem = run(ours, "tbprobe", "L1", "statistics", "small", 5, n_mem)
    mem_mix = run(ours, "tbprobe", "mix", "statistics", "small", 5, n_mem)
    for level, r in (("L1", mem), ("mix", mem_mix)):
        print(f"peak memory over {n_mem} steps at {level}: RSS {r['rss_first']:.0f} MB after warm-up -> "
              f"{r['rss_last']:.0f} MB at the end; GC-tracked objects {r['objects_first']} -> {r['objects_last']}")
    # the mean step and the cyclic GC over the same long run, for each tool (full collections are rare, so the
    # short runs' medians above leave them out; a training run pays them)
    long_runs = [("no tool", run(ours, "none", "L1", "statistics", "small", 5, n_mem)), ("tbprobe", mem)]
    if have_ms:
        long_runs.append(("msprobe", run(args.msprobe_python, "msprobe", "L1", "statistics", "small", 5, n_mem)))
    for name, r in long_runs:
        if "mean_s" in r:
            print(f"{name:>8} at L1 over {n_mem} steps: mean step {r['mean_s'] * 1e3:.2f} ms, of which cyclic GC "
                  f"{r['gc_s'] * 1e3:.2f} ms ({r['gc_full']} full collections)")
    if not have_ms:
        print("\nmsprobe not installed (../shared/peers/setup.sh): its column is empty")


if __name__ == "__main__":
    main()
