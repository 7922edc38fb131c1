"""Step-time overhead of the training monitor on a d=256 transformer, tbprobe beside the reference.

Default config: the norm of every weight gradient and the activations (inputs, outputs and their gradients) of
every block, plus the embedding and the head. Each tool runs in its own process (the reference in its own venv):
two copies of the same model train in alternating blocks of steps, one with the monitor; the overhead is the
ratio of their process CPU time per step (wall time is printed too, but on a shared machine it is mostly noise).

    .venv/bin/python bench/monitor_overhead.py [--quick] [--steps N]
    .venv/bin/python bench/monitor_overhead.py --dashboard [--quick]    # latency of the Monitor view's routes
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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
    """Runs in the tool's own interpreter. Two copies of the same model train in alternating blocks of steps, one
    without a monitor (A) and one with it (B). Each block's process CPU time is measured (every thread: torch's
    and the monitor's writer thread, whose queue is drained inside B's window), as well as its wall time. On a
    shared machine CPU time is what stays comparable: wall time mostly measures the neighbours."""
    import torch

    torch.set_num_threads(1)  # one compute thread: no spin-waiting threads inflating CPU time under load
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
        loss = loss_fn(model(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    tmp = tempfile.mkdtemp(prefix=f"monbench_{tool}_")
    atexit.register(shutil.rmtree, tmp, True)
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
    flush = getattr(mon, "flush", lambda: None)
    for i in range(warmup):
        one(0, i), one(1, i)
    flush()
    block = 3
    cpu = {0: 0.0, 1: 0.0}
    wall = {0: [], 1: []}
    done = 0
    while done < steps:
        n = min(block, steps - done)
        for k in ((0, 1) if (done // block) % 2 == 0 else (1, 0)):
            c0, w0 = time.process_time(), time.perf_counter()
            for i in range(n):
                one(k, done + i)
            if k == 1:
                flush()  # the monitor's deferred work counts against it
            cpu[k] += time.process_time() - c0
            wall[k].append((time.perf_counter() - w0) / n)
        done += n
    if hasattr(mon, "close"):
        mon.close()
    return {"cpu_base": cpu[0] / steps, "cpu_monitored": cpu[1] / steps, "wall_base": wall[0],
            "wall_monitored": wall[1]}


def dashboard_latency(tags: int, points: int, span: int) -> None:
    """Latency of the Monitor view's routes on a large job: ``tags`` series x ``points`` stored points spread over
    ``span`` steps (TensorBoard keeps 1000 points per series by default, so a 100k-step run looks like this), two
    ranks, read through TensorBoard's own data provider."""
    import numpy as np
    from tensorboard.backend.event_processing import data_provider as tb_data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from werkzeug import test as wtest

    sys.path.insert(0, ROOT)
    from tbprobe.monitor.config import AlertRule
    from tbprobe.monitor.writer import MonitorWriter
    from tbprobe.tb_plugin.monitor_routes import get_routes

    logdir = tempfile.mkdtemp(prefix="mondash_")
    atexit.register(shutil.rmtree, logdir, True)
    keys = [f"layers.{i // 4}.sub{i % 4}/output" for i in range(tags)]
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for rank in range(2):
        w = MonitorWriter(os.path.join(logdir, "job", f"rank{rank}"), ["norm"],
                          [AlertRule("AnomalyTurbulence", 3.0, 5)], rank, queue_size=8)
        for k in range(points):
            w.submit(k * (span // points), keys, rng.random((tags, 1)) + 1.0)
        w.close()
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": points})
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    t_load = time.perf_counter() - t0
    provider = tb_data_provider.MultiplexerDataProvider(mux, logdir)
    from tbprobe.monitor import dashboard, warm_start
    from tbprobe.monitor.series_cache import SERIES_CACHE
    from tbprobe.monitor.warmup import WARMER

    warm_start.POLL_S = 3600.0  # scenario 1: the view is opened before the launch warm-up's first poll
    routes = get_routes(base_plugin.TBContext(logdir=logdir, data_provider=provider))
    client = wtest.Client(lambda env, sr: routes[env["PATH_INFO"]](env, sr))
    hm = {"job": "job", "metric": "output", "op": "norm"}
    # In the order a user meets them. "runs" lists the jobs and starts the background warm-up of the series cache
    # (tbprobe.monitor.warmup); the first heatmap is asked for at once, before the warm-up could read anything
    # (the worst case: the request reads its own page); then the user looks at it while the warm-up goes on
    # ("wait"), and the next views find their series warm.
    cases = [
        ("runs", "/api/monitor/runs", {}),
        ("heatmap step x module, 200 rows x 400 cols", "/api/monitor/heatmap", dict(hm, limit=200, max_cols=400)),
        ("wait", None, None),
        ("heatmap step x module, next 200 rows", "/api/monitor/heatmap",
         dict(hm, limit=200, max_cols=400, offset=200)),
        ("heatmap step x rank", "/api/monitor/heatmap", dict(hm, mode="step_rank", module="layers.3.sub1")),
        ("heatmap module x rank, 200 rows", "/api/monitor/heatmap", dict(hm, mode="module_rank", limit=200)),
        ("series x4", "/api/monitor/series",
         {"job": "job", "s": [f"{r}|layers.{i}.sub0|output|norm" for r in (0, 1) for i in (1, 2)]}),
        ("anomalies", "/api/monitor/anomalies", {"job": "job"}),
    ]
    print(f"dashboard: 2 ranks x {tags} series x {points} points over {span} steps "
          f"(written in {t_write:.1f} s, loaded by TensorBoard in {t_load:.1f} s)")

    def timed(client, cases):
        print(f"{'route':<46}{'first ms':>10}{'again ms':>10}{'bytes':>10}")
        t_start = None
        for name, path, params in cases:
            if path is None:
                WARMER.join()
                print(f"  (background warm-up done {time.perf_counter() - t_start:.1f} s after the first request: "
                      f"{WARMER.read} series read by it so far)")
                continue
            times, size = [], 0
            for _ in range(3):
                t0 = time.perf_counter()
                r = client.get(path, query_string=params)
                times.append(time.perf_counter() - t0)
                t_start = t_start or t0
                size = len(r.get_data())
                assert r.status_code == 200, r.get_data(as_text=True)[:300]
            # first: what the user waits for the first time; again: served from the series cache
            print(f"{name:<46}{times[0] * 1e3:>10.0f}{statistics.median(times[1:]) * 1e3:>10.0f}{size:>10}")

    print("1. the view opened right after TensorBoard started (warm-up starts with 'runs'):")
    timed(client, cases)
    # scenario 2: a fresh TensorBoard process, the view opened once the launch warm-up is done
    SERIES_CACHE.clear()
    dashboard._listings.clear()
    warm_start.POLL_S = 5.0  # TensorBoard polls every 30 s; its own load of such a directory takes minutes
    t0 = time.perf_counter()
    before = set(threading.enumerate())
    routes = get_routes(base_plugin.TBContext(logdir=logdir, data_provider=provider))
    for t in set(threading.enumerate()) - before:
        t.join()
    WARMER.join()
    print(f"2. the view opened after the launch warm-up (done {time.perf_counter() - t0:.1f} s after start-up):")
    timed(wtest.Client(lambda env, sr: routes[env["PATH_INFO"]](env, sr)), [c for c in cases if c[1]])


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
    ap.add_argument("--dashboard", action="store_true",
                    help="instead, time the Monitor view's routes on a large job (2 ranks x 1000 series)")
    args = ap.parse_args()
    steps = args.steps or (6 if args.quick else 30)
    if args.worker:
        print(json.dumps(worker(args.worker, steps, args.warmup)))
        return 0
    if args.dashboard:
        dashboard_latency(250 if args.quick else 1000, 200 if args.quick else 1000, 100_000)
        return 0
    results = {"tbprobe": _spawn(sys.executable, "tbprobe", steps, args.warmup)}
    if os.path.exists(PEER_PY):
        results["reference"] = _spawn(PEER_PY, "reference", steps, args.warmup)
    else:
        print("reference monitor not installed (run ../shared/peers/setup.sh): tbprobe only")
    print(f"d={D} transformer, {LAYERS} blocks, batch {BATCH}x{SEQ}, AdamW, CPU; {steps} steps per phase, "
          "CPU time per step (1 torch thread); config: norm of every weight gradient + activations of every block, embed and head")
    print(f"{'tool':<12}{'CPU/step, none':>16}{'CPU/step, monitored':>21}{'overhead':>10}"
          f"{'wall/step, none':>17}{'wall, monitored':>17}")
    overhead = {}
    for tool, r in results.items():
        b, m = r["cpu_base"] * 1e3, r["cpu_monitored"] * 1e3
        overhead[tool] = m / b - 1
        wb, wm = statistics.median(r["wall_base"]) * 1e3, statistics.median(r["wall_monitored"]) * 1e3
        print(f"{tool:<12}{b:>14.1f}ms{m:>19.1f}ms{overhead[tool]:>+10.1%}{wb:>15.1f}ms{wm:>15.1f}ms")
    if "reference" in overhead and overhead["reference"] > 0:
        print(f"tbprobe overhead / reference overhead: {overhead['tbprobe'] / overhead['reference']:.2f}")
    print(f"target: tbprobe <= +5.0%: {'met' if overhead['tbprobe'] <= 0.05 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
