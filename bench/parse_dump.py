"""Parse time and peak memory of reading a ~100 MB dump.json: tbprobe's load_dump beside msprobe's own loading.

    .venv/bin/python bench/parse_dump.py [--quick] [--size-mb 100] [--reps 3] [--no-count]

1. Generates (once, cached under bench/out/) an msprobe-format dump.json in the reference's layout (indent=1):
   Megatron-like module names with the APIs inside them, forward and backward, parameters_grad, statistics, a few
   NaN / Infinity values.
2. Loads it in fresh subprocesses, one per measurement, so peak RSS is the load's own:
   tbprobe   tbprobe.formats.dump_json.load_dump, in this venv
   stdlib    json.load of the same file, in this venv (what a plain reader costs)
   msprobe   msprobe.core.common.file_utils.load_json (what msprobe's graph builder calls), in the peer venv
3. Counts how many times `msprobe graph_visualize` loads each dump.json, by running it on the fixture dumps under a
   wrapper that counts json.load calls per file (build: -tp; compare: -tp -gp).
Prints a table with the ratios. Peak memory is reported as peak RSS minus the RSS before the load (the imports of
each tool are not the load's cost) and as the whole process's peak.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "parse_dump"
PEERS = Path(os.environ.get("PEERS_DIR", "/tmp/peers"))
PEER_PY = PEERS / "msprobe" / "bin" / "python"
FIXTURES = ROOT / "tests" / "fixtures" / "msprobe-26.2.0" / "inputs"


# ------------------------------------------------------------------------------------------- generation
def _item(rng: random.Random, shape, dtype="torch.bfloat16", grad=True):
    if rng.random() < 0.002:
        mx, mn, mean, norm = float("nan"), float("-inf"), float("nan"), float("inf")
    else:
        mx = rng.uniform(0.5, 8.0)
        mn = -rng.uniform(0.5, 8.0)
        mean = rng.uniform(-0.05, 0.05)
        norm = rng.uniform(10.0, 900.0)
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": grad}


def _fwd(rng, n_in=1, params=None):
    e = {"input_args": [_item(rng, (4096, 1, 5120)) for _ in range(n_in)],
         "input_kwargs": {}, "output": [_item(rng, (4096, 1, 5120))]}
    if params:
        e["parameters"] = {p: _item(rng, s, "torch.float32") for p, s in params.items()}
    return e


def _bwd(rng, n=1):
    return {"input": [_item(rng, (4096, 1, 5120), grad=False)], "output": [_item(rng, (4096, 1, 5120), grad=False)
                                                                         for _ in range(n)]}


def _layer_entries(rng, i):
    """Entries of one transformer layer, forward then backward, in completion order (APIs before their module)."""
    p = f"Module.module.module.language_model.encoder.layers.{i}"
    fwd = [
        (f"Functional.layer_norm.{2 * i}.forward", _fwd(rng, 3)),
        (f"{p}.input_norm.FusedLayerNorm.forward.0", _fwd(rng, 1, {"weight": (5120,), "bias": (5120,)})),
        (f"Functional.linear.{4 * i}.forward", _fwd(rng, 2)),
        (f"{p}.self_attention.query_key_value.ColumnParallelLinear.forward.0",
         _fwd(rng, 1, {"weight": (1920, 5120), "bias": (1920,)})),
        (f"Torch.baddbmm.{i}.forward", _fwd(rng, 3)),
        (f"Functional.softmax.{i}.forward", _fwd(rng, 1)),
        (f"Functional.dropout.{i}.forward", _fwd(rng, 1)),
        (f"Torch.bmm.{i}.forward", _fwd(rng, 2)),
        (f"{p}.self_attention.core_attention.CoreAttention.forward.0", _fwd(rng, 3)),
        (f"Functional.linear.{4 * i + 1}.forward", _fwd(rng, 2)),
        (f"Distributed.all_reduce.{2 * i}.forward", _fwd(rng, 1)),
        (f"{p}.self_attention.dense.RowParallelLinear.forward.0", _fwd(rng, 1, {"weight": (5120, 640)})),
        (f"{p}.self_attention.ParallelAttention.forward.0", _fwd(rng, 2)),
        (f"Tensor.__add__.{2 * i}.forward", _fwd(rng, 2)),
        (f"Functional.layer_norm.{2 * i + 1}.forward", _fwd(rng, 3)),
        (f"{p}.post_attention_norm.FusedLayerNorm.forward.0", _fwd(rng, 1, {"weight": (5120,), "bias": (5120,)})),
        (f"Functional.linear.{4 * i + 2}.forward", _fwd(rng, 2)),
        (f"Functional.gelu.{i}.forward", _fwd(rng, 1)),
        (f"Functional.linear.{4 * i + 3}.forward", _fwd(rng, 2)),
        (f"Distributed.all_reduce.{2 * i + 1}.forward", _fwd(rng, 1)),
        (f"{p}.mlp.ParallelMLP.forward.0", _fwd(rng, 1)),
        (f"Tensor.__add__.{2 * i + 1}.forward", _fwd(rng, 2)),
        (f"{p}.ParallelTransformerLayer.forward.0", _fwd(rng, 1)),
    ]
    return fwd


def _backward_of(name):
    if name.startswith("Module."):
        return name.replace(".forward.", ".backward.")
    return name[: -len("forward")] + "backward"


def generate(path: Path, size_mb: float, seed: int = 0) -> int:
    """Write the dump in the reference's layout (indent=1); returns the number of entries."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    target = size_mb * 1e6
    n = 0
    with open(tmp, "w") as f:
        f.write('{\n "task": "statistics",\n "level": "mix",\n "framework": "pytorch",\n "dump_data_dir": null,\n'
                ' "data": {')
        sep = "\n  "
        i = 0
        backward = []
        while f.tell() < target * 0.55:  # forward half, then the backward of the same layers
            for name, entry in _layer_entries(rng, i):
                f.write(f"{sep}{json.dumps(name)}: {json.dumps(entry, indent=1).replace(chr(10), chr(10) + '  ')}")
                sep = ",\n  "
                n += 1
                backward.append(name)
            i += 1
        for name in reversed(backward):
            if f.tell() >= target:
                break
            if name.startswith("Module.") and rng.random() < 0.3 and "FusedLayerNorm" in name:
                grad = {"weight": [_item(rng, (5120,), "torch.float32", False)],
                        "bias": [_item(rng, (5120,), "torch.float32", False)]}
                gname = name.split(".forward.")[0] + ".parameters_grad.0"  # Module.<path>.<Class>.parameters_grad.0
                f.write(f"{sep}{json.dumps(gname)}: "
                        f"{json.dumps(grad, indent=1).replace(chr(10), chr(10) + '  ')}")
                n += 1
            entry = _bwd(rng, 2 if name.startswith(("Functional.linear", "Torch.")) else 1)
            f.write(f"{sep}{json.dumps(_backward_of(name))}: {json.dumps(entry, indent=1).replace(chr(10), chr(10) + '  ')}")
            n += 1
        f.write("\n }\n}\n")
    tmp.replace(path)
    return n


# ------------------------------------------------------------------------------------------ measurement
_MEASURE = textwrap.dedent("""
    import json, os, resource, sys, time
    def rss_kb():
        with open('/proc/self/statm') as f:
            return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') // 1024
    kind, path = sys.argv[1], sys.argv[2]
    if kind.startswith('tbprobe'):
        from tbprobe.formats.dump_json import load_dump
        if kind == 'tbprobe_eager':
            load = lambda p: load_dump(p, lazy=False)
        elif kind == 'tbprobe_all':
            def load(p):
                d = load_dump(p)
                for name, entry in d.entries.items():  # decode every entry once, keep none (a builder's pass)
                    pass
                return d
        else:
            load = load_dump
        count = lambda d: len(d.entries)
    elif kind == 'stdlib':
        def load(p):
            with open(p) as f:
                return json.load(f)
        count = lambda d: len(d['data'])
    else:
        from msprobe.core.common.file_utils import load_json as load
        count = lambda d: len(d['data'])
    base = rss_kb()
    c0, t0 = time.process_time(), time.perf_counter()
    d = load(path)
    t1, c1 = time.perf_counter(), time.process_time()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({'seconds': t1 - t0, 'cpu': c1 - c0, 'peak_kb': peak, 'base_kb': base, 'entries': count(d)}))
""")


def measure(kind: str, python: str, path: Path, reps: int) -> dict:
    runs = []
    for _ in range(reps):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        res = subprocess.run([python, "-c", _MEASURE, kind, str(path)], capture_output=True, text=True, env=env,
                             cwd=tempfile.gettempdir(), timeout=1800)
        if res.returncode != 0:
            raise SystemExit(f"{kind}: measurement failed:\n{res.stderr[-3000:]}")
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["seconds"])
    return {"seconds": best["seconds"], "all_seconds": [r["seconds"] for r in runs],
            "cpu": min(r["cpu"] for r in runs),
            "peak_mb": min(r["peak_kb"] for r in runs) / 1024,
            "delta_mb": min(r["peak_kb"] - r["base_kb"] for r in runs) / 1024, "entries": best["entries"]}


_COUNTER = textwrap.dedent("""
    import json, os, sys
    log = os.environ['TBPROBE_COUNT_LOG']
    _load = json.load
    def counting_load(fp, *a, **k):
        name = getattr(fp, 'name', '?')
        if str(name).endswith('dump.json'):
            with open(log, 'a') as f:
                f.write(str(name) + '\\n')
        return _load(fp, *a, **k)
    json.load = counting_load
    sys.argv = ['msprobe'] + sys.argv[1:]
    from msprobe.msprobe import main
    main()
""")


def count_msprobe_loads() -> dict:
    """How many json.load calls `msprobe graph_visualize` makes per dump.json, for a build and a compare."""
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for side in ("npu_stat", "bench_stat"):
            shutil.copytree(FIXTURES / side, work / side)
        cases = {"build": ["-tp", str(work / "npu_stat")],
                 "compare": ["-tp", str(work / "npu_stat"), "-gp", str(work / "bench_stat")]}
        for case, args in cases.items():
            log = work / f"{case}.log"
            log.write_text("")
            env = dict(os.environ, TBPROBE_COUNT_LOG=str(log))
            res = subprocess.run([str(PEER_PY), "-c", _COUNTER, "graph_visualize", *args, "-o", str(work / case)],
                                 capture_output=True, text=True, env=env, cwd=work, timeout=600)
            if res.returncode != 0:
                raise SystemExit(f"msprobe graph_visualize ({case}) failed:\n{res.stderr[-3000:]}")
            lines = [line for line in log.read_text().splitlines() if line]
            per_file = {}
            for line in lines:
                per_file[line] = per_file.get(line, 0) + 1
            result[case] = max(per_file.values()) if per_file else 0
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 MB file, one repetition")
    ap.add_argument("--size-mb", type=float, default=100.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-count", action="store_true", help="skip counting msprobe's loads per command")
    args = ap.parse_args()
    size = 10.0 if args.quick else args.size_mb
    reps = 1 if args.quick else args.reps

    path = OUT / f"dump_{int(size)}mb" / "dump.json"
    if not path.exists():
        print(f"generating {path} ...", flush=True)
        generate(path, size)
    mb = path.stat().st_size / 1e6

    have_peer = PEER_PY.exists()
    rows = {kind: measure(kind, sys.executable, path, reps)
            for kind in ("tbprobe", "tbprobe_all", "tbprobe_eager", "stdlib")}
    if have_peer:
        rows["msprobe"] = measure("msprobe", str(PEER_PY), path, reps)
    loads = count_msprobe_loads() if (have_peer and not args.no_count) else {}
    for r in rows.values():
        assert r["entries"] == rows["tbprobe"]["entries"], "the readers disagree on the number of entries"

    print(f"\ndump.json: {mb:.1f} MB, {rows['tbprobe']['entries']} entries; best of {reps} runs, each in a fresh process")
    print("wall = elapsed seconds, cpu = process CPU seconds (steadier on a shared machine); load MB = peak RSS minus "
          "RSS before the load")
    print(f"{'reader':<40} {'wall s':>7} {'cpu s':>7} {'peak MB':>8} {'load MB':>8}")
    labels = {"tbprobe": "tbprobe load_dump (lazy, default)",
              "tbprobe_all": "tbprobe load_dump + decode every entry",
              "tbprobe_eager": "tbprobe load_dump(lazy=False)",
              "stdlib": "stdlib json.load (for scale)",
              "msprobe": "msprobe load_json (one load)"}
    for k, r in rows.items():
        print(f"{labels[k]:<40} {r['seconds']:>7.2f} {r['cpu']:>7.2f} {r['peak_mb']:>8.0f} {r['delta_mb']:>8.0f}")
    if have_peer:
        m = rows["msprobe"]
        print("\nratios msprobe / tbprobe (higher is better for tbprobe); time per command = msprobe's loads of one "
              "dump.json in that command vs tbprobe's one read")
        head = "".join(f"{c + ' wall':>14}{c + ' cpu':>13}" for c in ["1 load"] + list(loads))
        print(f"{'tbprobe reader':<40}{head} {'load MB':>8} {'peak MB':>8}")
        for k in ("tbprobe", "tbprobe_all", "tbprobe_eager"):
            t = rows[k]
            cells = "".join(f"{n * m['seconds'] / t['seconds']:>13.2f}x{n * m['cpu'] / t['cpu']:>12.2f}x"
                            for n in [1] + list(loads.values()))
            print(f"{labels[k]:<40}{cells} {m['delta_mb'] / t['delta_mb']:>7.2f}x {m['peak_mb'] / t['peak_mb']:>7.2f}x")
        for case, n in loads.items():
            print(f"msprobe graph_visualize {case}: json.load of each dump.json {n} time(s) per command")
    else:
        print("\nmsprobe not installed (run ../shared/peers/setup.sh): no reference figures")
    print(json.dumps({"size_mb": mb, "rows": rows, "msprobe_loads": loads}, default=lambda o: None,
                     allow_nan=False) if all(math.isfinite(r["seconds"]) for r in rows.values()) else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
