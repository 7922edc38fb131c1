"""Graph build and compare: tbprobe beside `msprobe graph_visualize` on the same generated dumps, in one run.

    .venv/bin/python bench/graph_compare.py [--quick] [--sizes 20000 100000] [--no-reference] [--tensor-mb 256]

1. Generates (cached under bench/out/graph_compare/) msprobe-format dumps of N entries per side: Megatron-like
   module names (ParallelTransformerLayer > self_attention / mlp > column/row parallel linears), APIs inside the
   leaf modules, forward and backward, 3 tensors + 2 scalars per API call, statistics, stack.json, construct.json.
   The bench side is the debug side with small perturbations of the statistics.
2. Times each tool as a subprocess: wall time and peak RSS of the whole process tree (worker processes included),
   for build (-tp) and compare (-tp -gp).
3. Tensor mode: a compare of dumps with real .pt tensor files (--tensor-mb per side): read throughput of tbprobe
   (bytes of tensor data read on both sides / wall time), the files read once before (see _warm).
tbprobe's modules are byte-compiled first (see _compile).
Prints a table with the ratios. Sizes: --quick runs 20k only.
"""
import argparse
import compileall
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "graph_compare"
PEERS = Path(os.environ.get("PEERS_DIR", "/tmp/peers"))
MSPROBE = PEERS / "msprobe" / "bin" / "msprobe"
PY = sys.executable

_LEAVES = [("self_attention.query_key_value", "ColumnParallelLinear", ["Torch.matmul", "Tensor.__add__"]),
           ("self_attention.core_attention", "CoreAttention", ["Torch.baddbmm", "Functional.softmax",
                                                               "Torch.bmm"]),
           ("self_attention.dense", "RowParallelLinear", ["Torch.matmul", "Distributed.all_reduce"]),
           ("post_attention_norm", "RMSNorm", ["Tensor.pow", "Tensor.mean", "Torch.rsqrt", "Tensor.__mul__"]),
           ("mlp.dense_h_to_4h", "ColumnParallelLinear", ["Torch.matmul"]),
           ("mlp.activation", "SwiGLU", ["Functional.silu", "Tensor.__mul__"]),
           ("mlp.dense_4h_to_h", "RowParallelLinear", ["Torch.matmul", "Distributed.all_reduce"])]


def _tensor(rng, shape, scale=1.0, data_name=None):
    item = {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": list(shape),
            "Max": rng.uniform(0.5, 8.0) * scale, "Min": -rng.uniform(0.5, 8.0) * scale,
            "Mean": rng.uniform(-0.05, 0.05) * scale, "Norm": rng.uniform(10.0, 900.0) * scale,
            "requires_grad": True}
    if data_name:
        item["data_name"] = data_name
    return item


def _api_entry(rng, backward: bool):
    shape = (4096, 1, 5120)
    if backward:
        return {"input": [_tensor(rng, shape)],
                "output": [_tensor(rng, shape), _tensor(rng, shape), _tensor(rng, (5120,)),
                           {"type": "int", "value": 1}, {"type": "float", "value": 1.0}]}
    return {"input_args": [_tensor(rng, shape), _tensor(rng, (5120, 5120)), {"type": "int", "value": -1}],
            "input_kwargs": {"alpha": {"type": "float", "value": 1.0}},
            "output": [_tensor(rng, shape)]}


def generate(folder: Path, entries: int, seed: int) -> None:
    """One rank folder with about `entries` dump entries (the same names for every seed)."""
    rng = random.Random(seed)
    data, construct, stack = {}, {}, {}
    counters = {}
    layer = 0
    fwd_order = []
    while len(fwd_order) * 2 < entries:
        lname = f"Module.module.module.language_model.encoder.layers.{layer}.ParallelTransformerLayer"
        fwd_order.append((lname + ".forward.0", None))
        for path, cls, apis in _LEAVES:
            mname = f"Module.module.module.language_model.encoder.layers.{layer}.{path}.{cls}"
            fwd_order.append((mname + ".forward.0", lname + ".forward.0"))
            for api in apis:
                k = counters.get(api, 0)
                counters[api] = k + 1
                fwd_order.append((f"{api}.{k}.forward", mname + ".forward.0"))
        layer += 1
    # forward: entries complete children-first; construct is in call order
    for name, parent in fwd_order:
        construct[name] = parent
    for name, _ in fwd_order:
        if ".forward.0" in name and name.startswith("Module."):
            continue
        data[name] = _api_entry(rng, False)
    for name, _ in fwd_order:
        if name.startswith("Module."):
            data[name] = _api_entry(rng, False)
    # backward in reverse order
    for name, parent in reversed(fwd_order):
        bname = name.replace(".forward", ".backward")
        bparent = parent.replace(".forward", ".backward") if parent else None
        construct[bname] = bparent
        data[bname] = _api_entry(rng, True)
    stack_id = 0
    for name in list(data)[:: max(1, len(data) // 500)]:
        stack[str(stack_id)] = [[name], [f"File /work/megatron/model/transformer.py, line {100 + stack_id}, in "
                                         f"forward, \n out = self.op(x)"]]
        stack_id += 1
    rank = folder / "step0" / "rank0"
    rank.mkdir(parents=True, exist_ok=True)
    with open(rank / "dump.json", "w") as f:
        json.dump({"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None,
                   "data": data}, f, indent=1)
    with open(rank / "construct.json", "w") as f:
        json.dump(construct, f, indent=1)
    with open(rank / "stack.json", "w") as f:
        json.dump(stack, f, indent=1)


def generate_tensor(folder: Path, megabytes: int, seed: int) -> int:
    """A tensor-mode dump: APIs whose outputs are saved as .pt files (1M float32 each). Returns bytes saved."""
    import torch

    rank = folder / "step0" / "rank0"
    tdir = rank / "dump_tensor_data"
    tdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(1)
    n = max(1, megabytes // 4)
    data, construct = {}, {}
    total = 0
    for i in range(n):
        name = f"Torch.matmul.{i}.forward"
        base = torch.randn(1024, 1024, generator=gen)
        t = base + (seed * 1e-3) * torch.randn(1024, 1024, generator=gen)
        fname = f"{name}.output.0.pt"
        torch.save(t, tdir / fname)
        total += t.numel() * 4
        data[name] = {"input_args": [], "input_kwargs": {},
                      "output": [_tensor(rng, (1024, 1024), data_name=fname)]}
        construct[name] = None
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "pytorch",
                                                "dump_data_dir": str(tdir), "data": data}))
    (rank / "construct.json").write_text(json.dumps(construct))
    (rank / "stack.json").write_text("{}")
    return total


def measure(cmd, cwd=None):
    """(wall seconds, peak RSS of the process tree in bytes, return code)."""
    # stderr goes to a file, not a pipe: a chatty tool would fill the pipe and block while we only poll
    err_file = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            procs = [ps] + ps.children(recursive=True)
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
        except psutil.Error:
            pass
        try:  # (not a sleep: the wall time ends when the process does, not at the next poll)
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
    wall = time.perf_counter() - start
    err_file.seek(0)
    err = err_file.read().decode(errors="replace")
    err_file.close()
    if proc.returncode != 0:
        print(f"  ! {' '.join(map(str, cmd[:4]))} exited {proc.returncode}: {err.strip()[-300:]}", file=sys.stderr)
    return wall, peak, proc.returncode


def _compile() -> None:
    """Byte-compile tbprobe's modules, as pip does at install (msprobe's were): this checkout may run with
    PYTHONDONTWRITEBYTECODE=1, and every run would then compile all of them again (about 0.05-0.1 s)."""
    compileall.compile_dir(str(ROOT / "tbprobe"), quiet=1)


def _warm(folder: Path) -> None:
    """Read the tensor files once, so that their pages are in the page cache, as right after they were dumped:
    the figure is the reader's, not the disk's. (After the long msprobe runs they may have left the cache: the
    same 512 MB then took 1.7-2.5 s instead of 0.9-1.1 s here.)"""
    for p in sorted(folder.rglob("*.pt")):
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def _fmt(seconds, rss):
    return f"{seconds:7.2f} s {rss / 2**20:7.0f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20k entries only, small tensor case")
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--no-reference", action="store_true", help="skip msprobe")
    ap.add_argument("--tensor-mb", type=int, default=None, help="tensor data per side for the throughput case")
    args = ap.parse_args()
    sizes = args.sizes or ([20000] if args.quick else [20000, 100000])
    tensor_mb = args.tensor_mb if args.tensor_mb is not None else (64 if args.quick else 256)
    reference = not args.no_reference and MSPROBE.exists()
    if not reference and not args.no_reference:
        print(f"msprobe not found at {MSPROBE}: run ../shared/peers/setup.sh; reporting tbprobe only")
    _compile()
    rows = []
    for n in sizes:
        base = OUT / f"n{n}"
        if not (base / "debug" / "step0" / "rank0" / "dump.json").exists():
            print(f"generating {n} entries per side ...", flush=True)
            shutil.rmtree(base, ignore_errors=True)
            generate(base / "debug", n, 1)
            generate(base / "bench", n, 2)
        count = len(json.load(open(base / "debug" / "step0" / "rank0" / "dump.json"))["data"])
        for kind, extra in (("build", []), ("compare", ["-gp", str(base / "bench")])):
            res = {}
            out = base / f"out_tbprobe_{kind}"
            shutil.rmtree(out, ignore_errors=True)
            res["tbprobe"] = measure([PY, "-m", "tbprobe.graph_builder", "graph", "-q", "-tp", str(base / "debug")]
                                     + extra + ["-o", str(out)], cwd=ROOT)
            if kind == "compare" and n == sizes[0]:
                # the same work through the full `tbprobe` command (which also loads the other parts' modules)
                shutil.rmtree(out, ignore_errors=True)
                res["tbprobe CLI"] = measure([PY, "-m", "tbprobe", "graph", "-q", "-tp", str(base / "debug")]
                                             + extra + ["-o", str(out)], cwd=ROOT)
            if reference:
                out = base / f"out_msprobe_{kind}"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(parents=True)
                res["msprobe"] = measure([str(MSPROBE), "graph_visualize", "-tp", str(base / "debug")] + extra
                                         + ["-o", str(out)])
            rows.append((count, kind, res))
            t = res["tbprobe"]
            line = f"{count:>7} entries {kind:8} tbprobe {_fmt(t[0], t[1])}"
            if "tbprobe CLI" in res:
                line += f" (full tbprobe CLI {_fmt(*res['tbprobe CLI'][:2])})"
            if "msprobe" in res:
                m = res["msprobe"]
                line += f" | msprobe {_fmt(m[0], m[1])} | speed x{m[0] / t[0]:.1f}, memory {t[1] / m[1]:.2f}"
            print(line, flush=True)
    # tensor-mode throughput: two sizes, so the fixed start-up cost (interpreter, torch import in the workers)
    # can be told apart from the marginal read + compare rate
    tensor_runs = []
    for mb in sorted({max(8, tensor_mb // 8), tensor_mb}):
        tbase = OUT / f"tensor{mb}"
        if not (tbase / "bench" / "step0" / "rank0" / "dump.json").exists():
            shutil.rmtree(tbase, ignore_errors=True)
            generate_tensor(tbase / "debug", mb, 0)
            generate_tensor(tbase / "bench", mb, 1)
        nbytes = sum(p.stat().st_size for p in tbase.rglob("*.pt"))
        out = tbase / "out_tbprobe"
        shutil.rmtree(out, ignore_errors=True)
        _warm(tbase)
        wall, peak, _ = measure([PY, "-m", "tbprobe.graph_builder", "graph", "-q", "-tp", str(tbase / "debug"),
                                 "-gp", str(tbase / "bench"), "-o", str(out)], cwd=ROOT)
        tensor_runs.append((nbytes, wall, peak))
    print()
    print("| entries per side | work | tbprobe wall | tbprobe peak RSS | msprobe wall | msprobe peak RSS |"
          " speed-up | memory ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for count, kind, res in rows:
        t = res["tbprobe"]
        m = res.get("msprobe")
        print(f"| {count} | {kind} | {t[0]:.2f} s | {t[1] / 2**20:.0f} MB | "
              + (f"{m[0]:.2f} s | {m[1] / 2**20:.0f} MB | {m[0] / t[0]:.1f}x | {t[1] / m[1]:.2f} |" if m else
                 "- | - | - | - |"))
    for count, kind, res in rows:
        if "tbprobe CLI" in res:
            c, m = res["tbprobe CLI"], res.get("msprobe")
            print(f"| {count} | {kind}, via `tbprobe graph` | {c[0]:.2f} s | {c[1] / 2**20:.0f} MB | "
                  + (f"{m[0]:.2f} s | {m[1] / 2**20:.0f} MB | {m[0] / c[0]:.1f}x | {c[1] / m[1]:.2f} |" if m else
                     "- | - | - | - |"))
    for nbytes, wall, peak in tensor_runs:
        print(f"\ntensor mode: {nbytes / 2**20:.0f} MB of .pt files (both sides) compared in {wall:.2f} s "
              f"(whole command) = {nbytes / 2**20 / wall:.0f} MB/s, peak RSS {peak / 2**20:.0f} MB")
    if len(tensor_runs) == 2:
        (b0, t0, _), (b1, t1, _) = tensor_runs
        if t1 > t0:
            print(f"tensor mode, marginal rate (start-up excluded): {(b1 - b0) / 2**20 / (t1 - t0):.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
