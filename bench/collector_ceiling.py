"""The ceiling of small L0: what PyTorch's hook machinery costs, and what a perfect port of tbprobe's L0 path could reach.

    .venv/bin/python bench/collector_ceiling.py [--rounds 100 | --quick] [--dump-root DIR]

The small GPT of bench/collector_overhead.py, one process, one model per set-up, timed in rounds as
bench/collector_breakdown.py times them (each set-up's step twice in a row, the second kept; CPU time; the median
over the rounds of set-up step / no-tool step).

  none         no tool
  hooks        a forward pre-hook and a forward hook on every module, doing nothing: PyTorch's hook dispatch
  floor        hooks, plus what tbprobe's L0 capture hooks in the autograd graph, doing nothing: the share of each
               input that requires grad (_cgrad.call_start before the call, hook_consumers after it), a C++ hook
               on the autograd node of each output (_cgrad.hook_node), a hook on each parameter's gradient
  ideal        floor, plus what any L0 collector must compute: the item (statistics) of every input, output,
               parameter and gradient through _cgrad.ItemReader, and every call's stack key. No names, records,
               construct, data flow or files: a port of all of tbprobe's L0 bookkeeping to C++ at zero cost
  no writer    tbprobe as it ships, its steps recorded but not written
  full         tbprobe as it ships

The ideal's gradients reach the items through a Python lambda (one frame each), so it is a slight overestimate.
"ideal + writer" adds what the writer cost in the same run (full - no writer): the most a port that kept today's
files could reach.
"""
import argparse
import operator
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_breakdown import _debugger, paired_rounds  # noqa: E402
from collector_overhead import ROOT, SMALL, gpt_training  # noqa: E402

SETUPS = ("none", "hooks", "floor", "ideal", "no writer", "full")


def _attach(model, level: str, reader) -> None:
    """Hooks of set-up `level` ("hooks", "floor" or "ideal") on every module of `model` but the root."""
    import torch

    from tbprobe.collector._cgrad import call_start, hook_consumers, hook_node
    from tbprobe.collector._cstats import stack_key

    own, codes, prefix = {}, {}, os.path.join(ROOT, "tbprobe")
    items = level == "ideal"
    on_node = (lambda i, g: reader(g)) if items else operator.is_   # operator.is_: a C call that keeps nothing

    def on_param(g):
        if items:
            reader(g)

    starts = []

    def pre(mod, args, kwargs):
        if level == "hooks":
            return None
        if items:
            [reader(a) for a in args]
            stack_key(sys._getframe(1), own, prefix, codes)
        starts.append(call_start([a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]))
        return None

    def post(mod, args, kwargs, output):
        if level == "hooks":
            return None
        outs = [output] if isinstance(output, torch.Tensor) else list(output)
        if items:
            [reader(o) for o in outs]
            {n: reader(p) for n, p in mod._parameters.items()}
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and o.requires_grad:
                hook_node(o, on_node, i)
        hook_consumers(starts.pop(), outs, on_node)
        return None

    for path, mod in model.named_modules():
        if not path:
            continue
        mod.register_forward_pre_hook(pre, with_kwargs=True)
        mod.register_forward_hook(post, with_kwargs=True)
        if level != "hooks":
            for p in mod.parameters(recurse=False):
                p.register_hook(on_param)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--quick", action="store_true", help="20 rounds")
    p.add_argument("--dump-root", metavar="DIR", help="where the dumps go (default: the system's temporary folder)")
    args = p.parse_args()
    if args.quick:
        args.rounds = 20
    sys.path.insert(0, ROOT)
    try:
        import tbprobe.collector._cgrad  # noqa: F401
    except ImportError:
        sys.exit("collector_ceiling: tbprobe.collector._cgrad is not built (python setup.py build_ext --inplace)")
    from tbprobe.collector.pytorch.stats import StatBuffer

    stats = StatBuffer()
    runs = {name: gpt_training(SMALL) for name in SETUPS}
    for name in ("hooks", "floor", "ideal"):
        _attach(runs[name][0], name, stats.host_item)
    tmp = tempfile.mkdtemp(prefix="bench_ceiling_", dir=args.dump_root)
    try:
        dbgs = {name: _debugger(tmp, name, "L0") for name in ("no writer", "full")}

        def after_step(name: str) -> None:
            if name == "ideal":
                stats.reset()    # the reader's memory lasts one step, as in the collector

        def after_first(name: str) -> None:
            if name == "no writer":
                dbgs[name]._writer.submit = lambda *a, **k: None

        times = paired_rounds(SETUPS, runs, dbgs, args.rounds, after_step=after_step, after_first=after_first)
        for dbg in dbgs.values():
            dbg.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = times["none"]
    ratio = {name: statistics.median(t / b for t, b in zip(times[name], base)) for name in SETUPS}
    print(f"small GPT, L0, {args.rounds} rounds")
    print(f"{'set-up':<16} {'step ms':>8} {'ratio':>7}")
    for name in SETUPS:
        print(f"{name:<16} {statistics.median(times[name]) * 1e3:>8.2f} {ratio[name]:>6.2f}x")
    print(f"{'ideal + writer':<16} {'':>8} {ratio['ideal'] + ratio['full'] - ratio['no writer']:>6.2f}x")


if __name__ == "__main__":
    main()
