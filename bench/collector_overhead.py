"""Collector overhead: the same training loop with no tool, with msprobe and with tbprobe, in one run.

    .venv/bin/python bench/collector_overhead.py [--quick] [--repeat 3] [--dump-root DIR] [--only CASE]
        [--optimizer sgd|adamw] [--msprobe-python /tmp/peers/msprobe/bin/python]

The cases: the issue's (a small and a d=256 GPT, examples/train_gpt.py, trained with SGD) and the same four small
cases on examples/train_llama.py's Llama-style decoder at the same size, trained with AdamW ("small-llama"), and on
transformers' Llama at that size, trained with AdamW ("small-hf-llama"), with L0 on its Qwen2 and GPT-2 too
("small-hf-qwen2", "small-hf-gpt2"; all need bash scripts/hf_deps.sh).

Each tool runs in a fresh subprocess (msprobe patches torch globally). Each process builds two identical models
and times them in rounds of four steps: two of one model with no tool, then two of the other with the tool
collecting (start, the training step, stop, step). The second of each pair is the one compared, so each follows a
step of its own kind, as in a run with or without the tool. A step's time is the CPU time of the whole process
(training and writer threads); CPU time because wall time on a shared 2-core machine is mostly noise. The ratio is
the median over the rounds of tool step / no-tool step: this machine's speed drifts by up to 2x over seconds, and
two steps a few milliseconds apart see it at one speed, where two blocks of steps do not. Prints those ratios,
tbprobe's added time as a fraction of msprobe's, and how much slower a no-tool step runs right after a tool step.
The dumps are all deleted at the end of the run, not after each worker (main says why).
"""
import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_PYTHON = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "python")

SMALL = {"model": "gpt", "dim": 32, "layers": 2, "ctx": 16, "batch": 4, "optimizer": "sgd"}
LARGE = {"model": "gpt", "dim": 256, "layers": 2, "ctx": 64, "batch": 8, "optimizer": "sgd"}
# examples/train_llama.py's decoder at the small GPT's size, trained with AdamW as LLMs are: many operators per
# module (RMSNorm from plain operators, rotary embeddings, grouped-query attention, SwiGLU) and an optimizer step of
# ~11 operators per parameter at L1, where the GPT's modules mostly hold one operator each
SMALL_LLAMA = {"model": "llama", "dim": 32, "layers": 2, "ctx": 16, "batch": 4, "optimizer": "adamw"}
# HuggingFace transformers' causal LMs at the same size (examples/train_hf.py), as users train them: their modules
# do more Python work per call than the two scripts' models (masks, position ids, output objects). Need
# transformers, which neither tool depends on (scripts/hf_deps.sh installs a pinned copy for both interpreters);
# without it these cases are skipped with a message.
HF_ARCHS = ("llama", "qwen2", "gpt2")
SHAPES = {"small": SMALL, "large": LARGE, "small-llama": SMALL_LLAMA,
          **{f"small-hf-{a}": dict(SMALL_LLAMA, model=f"hf-{a}") for a in HF_ARCHS}}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def have_hf(python: str) -> bool:
    """Whether `python` can import transformers (its own, or the pinned one scripts/hf_deps.sh installs)."""
    code = (f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'examples')!r}); import train_hf; "
            "sys.exit(0 if train_hf.have_transformers() else 1)")
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def gpt_training(shape: dict):
    """The benchmarks' model (examples/train_gpt.py's GPT, train_llama.py's decoder when shape["model"] is
    "llama", transformers' model of that architecture when "hf-<arch>"; one thread, seeded) and its training step:
    (model, train_step), train_step() being one untimed step of shape["optimizer"] (SGD unless "adamw") on a fixed
    batch of random tokens."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import torch.nn.functional as F
    from train_gpt import GPT
    from train_hf import HFCausalLM
    from train_llama import Llama

    torch.set_num_threads(1)
    torch.manual_seed(0)
    kind = shape.get("model", "gpt")
    if kind.startswith("hf-"):
        model = HFCausalLM(kind[3:], dim=shape["dim"], layers=shape["layers"], ctx=shape["ctx"])
    elif kind == "llama":
        model = Llama(vocab=64, dim=shape["dim"], heads=4, kv_heads=2, layers=shape["layers"], hidden=2 * shape["dim"])
    else:
        model = GPT(dim=shape["dim"], heads=4, layers=shape["layers"], ctx=shape["ctx"], dropout=0.0)
    opt = (torch.optim.AdamW(model.parameters(), lr=1e-3) if shape.get("optimizer") == "adamw"
           else torch.optim.SGD(model.parameters(), lr=0.01))
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, 64, (shape["batch"], shape["ctx"] + 1), generator=gen)
    x, y = data[:, :-1], data[:, 1:]

    def train_step() -> None:
        loss = F.cross_entropy(model(x).view(-1, 64), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return model, train_step


def write_config(folder: str, name: str, level: str, mode: str, steps: int) -> str:
    """The benchmarks' config.json (the reference's keys, read by both tools): statistics of every call at
    `level`, dumped under folder/name for steps 0..steps-1, written synchronously. Returns its path."""
    cfg = {"task": "statistics", "dump_path": os.path.join(folder, name), "rank": [], "step": list(range(steps)),
           "level": level, "async_dump": False,
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": mode}}
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def worker(tool: str, level: str, mode: str, shape: dict, warmup: int, steps: int, started: bool) -> dict:
    # two identical models: `plain` is never shown to the tool, `model` is the tool's (see _measure's rounds)
    _, plain_step = gpt_training(shape)
    model, train_step = gpt_training(shape)
    # (not deleted here: the whole run's dumps go at its end, see main)
    tmp = tempfile.mkdtemp(prefix=f"bench_{tool}_", dir=os.environ.get("BENCH_DUMP_ROOT") or None)
    return _measure(tool, level, mode, warmup, steps, started, model, train_step, plain_step, tmp)


def _measure(tool, level, mode, warmup, steps, started, model, train_step, plain_step, tmp) -> dict:
    debugger = None
    if tool != "none":
        path = write_config(tmp, "dump", level, mode, 2 * (warmup + steps))
        if tool == "msprobe":
            from msprobe.pytorch import PrecisionDebugger
        else:
            sys.path.insert(0, ROOT)
            from tbprobe import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=path)

    def tool_step() -> float:
        t0 = time.process_time()
        if debugger is not None and started:
            debugger.start(model=model)
        train_step()
        if debugger is not None and started:
            debugger.stop()
            debugger.step()
        return time.process_time() - t0

    def base_step() -> float:
        t0 = time.process_time()
        plain_step()
        return time.process_time() - t0

    times, base, rss = [], [], []
    # the cyclic GC's time in the measured tool steps: a tool's records that outlive a young collection are
    # promoted, and full collections (a walk over every object torch's import made) follow; the median step hides
    # them
    gc_time, gc_full, gc_start, in_tool = [0.0], [0], [0.0], [False]

    def on_gc(phase, info):
        if not in_tool[0] or len(times) < warmup:
            return
        if phase == "start":
            gc_start[0] = time.process_time()
        else:
            gc_time[0] += time.process_time() - gc_start[0]
            gc_full[0] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    objects_first = len(gc.get_objects())
    after_tool, tool_all = [], []
    for step in range(warmup + steps):
        # A round of four steps, so that each measured step follows a step of its own kind, as in a run with or
        # without the tool: the no-tool model twice (the first right after the tool's step, its caches cold from
        # the tool's work; the second, the reference, after a plain step), then the tool's model twice (the
        # first after a plain step, the second, the one measured, after a tool step).
        after_tool.append(base_step())
        base.append(base_step())
        in_tool[0] = True
        tool_all.append(tool_step())
        times.append(tool_step())
        tool_all.append(times[-1])
        in_tool[0] = False
        rss.append(_rss_mb())
        if step == warmup - 1:
            objects_first = len(gc.get_objects())   # (outside the clock) a leak shows here before it shows in RSS
    objects_last = len(gc.get_objects())
    gc.callbacks.remove(on_gc)
    # tbprobe's hook errors: a collector that met one has switched that part off, and would be timed doing less
    errors = getattr(debugger, "hook_errors", 0)
    if debugger is not None and hasattr(debugger, "close"):
        debugger.close()
    pairs = [t / b for t, b in zip(times[warmup:], base[warmup:])]
    cold = [a / b for a, b in zip(after_tool[warmup + 1:], base[warmup + 1:])]
    return {"ratio": statistics.median(pairs), "after_tool": statistics.median(cold),
            "step_s": statistics.median(times[warmup:]), "base_s": statistics.median(base[warmup:]),
            "rss_first": rss[min(warmup, len(rss) - 1)], "rss_last": rss[-1],
            "mean_s": statistics.fmean(tool_all[2 * warmup:]), "gc_s": gc_time[0] / (2 * steps),
            "gc_full": gc_full[0], "objects_first": objects_first, "objects_last": objects_last, "errors": errors}


def run(python: str, tool: str, level: str, mode: str, shape: str, warmup: int, steps: int,
        started: bool = True, optimizer: str = "") -> dict:
    cmd = [python, os.path.abspath(__file__), "--worker", tool, level, mode, shape, str(warmup), str(steps),
           "1" if started else "0", optimizer or "default"]
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
    p.add_argument("--dump-root", metavar="DIR",
                   help="where the tools write their dumps (default: the system's temporary folder); a step's files "
                        "cost 0.1-0.2 ms on tmpfs and 0.4-3 ms on this machine's disk")
    p.add_argument("--optimizer", choices=("sgd", "adamw"),
                   help="train every case with this optimizer (default: SGD for the GPT, AdamW for the Llama)")
    p.add_argument("--worker", nargs=8, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        tool, level, mode, shape, warmup, steps, started, optimizer = args.worker
        model = dict(SHAPES[shape], **({} if optimizer == "default" else {"optimizer": optimizer}))
        out = worker(tool, level, mode, model, int(warmup), int(steps), started == "1")
        print(json.dumps(out))
        return
    # Every worker's dump stays until the whole run is over. On ext4, a new inode costs more while many inodes
    # were deleted in the last minutes (perf: ext4's find_inode_bit walks them in recently_deleted()): deleting
    # one worker's dump made the next worker's step folders cost 3-30x more (60 us -> 190-1500 us a mkdir here).
    root = tempfile.mkdtemp(prefix="bench_collector_", dir=os.path.abspath(args.dump_root) if args.dump_root else None)
    os.environ["BENCH_DUMP_ROOT"] = root   # the workers inherit it
    print(f"dumps written under {root}, deleted at the end")
    try:
        _cases(p, args, sys.executable)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _cases(p: argparse.ArgumentParser, args: argparse.Namespace, ours: str) -> None:
    have_ms = os.path.exists(args.msprobe_python)
    n_small, n_large = (8, 3) if args.quick else (20, 6)
    cases = cases_all = [("small", "L0", "statistics"), ("small", "L1", "statistics"), ("small", "mix", "statistics"),
                         ("small", "L1", "md5"), ("large", "L0", "statistics"), ("large", "L1", "statistics"),
                         ("small-llama", "L0", "statistics"), ("small-llama", "L1", "statistics"),
                         ("small-llama", "mix", "statistics"), ("small-llama", "L1", "md5"),
                         ("small-hf-llama", "L0", "statistics"), ("small-hf-llama", "L1", "statistics"),
                         ("small-hf-llama", "mix", "statistics"), ("small-hf-llama", "L1", "md5"),
                         ("small-hf-qwen2", "L0", "statistics"), ("small-hf-gpt2", "L0", "statistics")]
    if args.only:
        wanted = {" ".join(c.split()) for c in args.only}
        cases = [c for c in cases if " ".join(c) in wanted]
        if not cases:
            p.error(f"--only: no such case (cases: {', '.join(' '.join(c) for c in cases_all)})")
    hf_ready = have_hf(ours) and (not have_ms or have_hf(args.msprobe_python))
    if any(c[0].startswith("small-hf-") for c in cases) and not hf_ready:
        print("transformers not found (bash scripts/hf_deps.sh installs it): the small-hf-* cases are skipped")
        cases = [c for c in cases if not c[0].startswith("small-hf-")]
    print(f"{'case':<28} {'no tool ms':>10} {'msprobe ms':>11} {'ratio':>7} {'tbprobe ms':>11} {'ratio':>7}"
          f" {'added tb/ms':>11}")
    rows = []
    for shape, level, mode in cases:
        n = n_large if shape == "large" else n_small
        trials = []
        for _ in range(max(1, args.repeat)):
            tb = run(ours, "tbprobe", level, mode, shape, 3, n, optimizer=args.optimizer)
            ms = (run(args.msprobe_python, "msprobe", level, mode, shape, 3, n, optimizer=args.optimizer) if have_ms
                  else {"error": "absent"})
            if "step_s" not in tb:
                raise SystemExit(f"tbprobe run failed: {tb.get('error')}")
            if tb["errors"]:
                raise SystemExit(f"tbprobe counted {tb['errors']} hook errors on {shape} {level} {mode}: its figure "
                                 "would time a collector that switched part of itself off")
            trials.append((tb, ms))
        # the trial whose tbprobe ratio is the median of the trials: one consistent run per row
        trials.sort(key=lambda tr: tr[0]["ratio"])
        tb, ms = trials[len(trials) // 2]
        b, r = tb["base_s"], tb["ratio"]
        m_ratio = ms["ratio"] if "ratio" in ms else float("nan")
        ms_added = (m_ratio - 1) * ms["base_s"] if "ratio" in ms else float("nan")
        frac = (r - 1) * b / ms_added if ms_added > 0 else float("nan")
        name = f"{shape} {level} {mode}"
        print(f"{name:<28} {b * 1e3:>10.2f} {ms.get('step_s', float('nan')) * 1e3:>11.2f} {m_ratio:>6.2f}x"
              f" {tb['step_s'] * 1e3:>11.2f} {r:>6.2f}x {frac:>11.3f}")
        rows.append((name, tb, ms))
    # the no-tool step right after the tool's step, against the one after it: what the tool's work costs the model's
    # own next step (cold caches; msprobe also leaves its API wrappers installed between steps); not in the ratios
    # above
    print("(no-tool step right after a tool step / the next no-tool step: tbprobe "
          + ", ".join(f"{tb['after_tool']:.2f}" for _, tb, _ in rows)
          + ("; msprobe " + ", ".join(f"{ms['after_tool']:.2f}" for _, _, ms in rows if "after_tool" in ms)
             if have_ms else "") + ")")
    if args.only:
        return
    # created but not started, and memory over many steps
    n_idle = 40 if args.quick else 100
    idle_ratios = []
    for _ in range(max(5, args.repeat)):   # the effect is nil by construction: many trials against the noise
        idle = run(ours, "tbprobe", "L1", "statistics", "small", 5, n_idle, started=False)
        idle_ratios.append(idle["ratio"])
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
