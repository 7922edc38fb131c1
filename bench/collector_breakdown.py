"""Where tbprobe's small-L0 time goes: the L0 collector with one part of its work taken out at a time.

    .venv/bin/python bench/collector_breakdown.py [--rounds 60 | --quick] [--level L0] [--fine] [--dump-root DIR]
        [--shape small|large|small-llama]

The small (or large) GPT of bench/collector_overhead.py, one process, one model per set-up (all identical), measured in
rounds: each set-up's step is timed twice in a row and the second is kept, so that each kept step follows a step
of its own kind; the set-ups' order is the same in every round. Prints each set-up's median step, its ratio to
no tool (median over the rounds) and what taking the part out saved against the whole collector. The parts are
taken out by replacing tbprobe internals on one debugger's objects, so this is a measuring tool, not a supported
configuration: its dumps are incomplete.

  full              the collector as it ships
  no writer         steps are recorded but not written (no JSON, no files, no events, no live graph)
  no backward       no input shares, no autograd-node or parameter-gradient hooks: forward records only
  no stacks         no stack keys (as extra_info false; construct stays)
  no items          records without tensor items (no statistics)
With --fine, the backward and the items split further, and the bookkeeping between them:
  no shares         no module shares of the inputs' gradients (their gradient hooks sit on the inputs themselves)
  no param grads    no parameter-gradient hooks
  no param items    forward records without their parameters' items
  no dataflow       no producers and consumers noted (dataflow.json)
  no counters       one call counter for all (names repeat) and no scope bookkeeping
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_overhead import ROOT, SHAPES, gpt_training, write_config  # noqa: E402

SETUPS = ("none", "full", "no writer", "no backward", "no stacks", "no items")
FINE = ("none", "full", "no shares", "no param grads", "no param items", "no dataflow", "no counters")


def _debugger(tmp: str, name: str, level: str):
    from tbprobe import PrecisionDebugger

    return PrecisionDebugger(config_path=write_config(tmp, name.replace(" ", "_"), level, "statistics", 100000))


def paired_rounds(setups: Sequence[str], runs: dict, dbgs: dict, rounds: int,
                  before: Optional[Callable[[str], None]] = None, after_step: Optional[Callable[[str], None]] = None,
                  after_first: Optional[Callable[[str], None]] = None) -> Dict[str, List[float]]:
    """CPU seconds of each set-up's kept steps over `rounds` rounds (after 3 unkept ones). In every round each
    set-up's step (start, training step, stop, step() where it has a debugger in `dbgs`) runs twice in a row and
    the second is kept, so that each kept step follows a step of its own kind. `before(name)` runs before a
    set-up's two steps, `after_step(name)` inside each timed step, `after_first(name)` after its first round."""
    times: Dict[str, List[float]] = {name: [] for name in setups}
    for rnd in range(rounds + 3):
        for name in setups:
            if before is not None:
                before(name)
            model, train_step = runs[name]
            dbg = dbgs.get(name)
            kept = 0.0
            for _ in range(2):
                t0 = time.process_time()
                if dbg is not None:
                    dbg.start(model=model)
                train_step()
                if dbg is not None:
                    dbg.stop()
                    dbg.step()
                if after_step is not None:
                    after_step(name)
                kept = time.process_time() - t0
            if rnd == 0 and after_first is not None:
                after_first(name)
            if rnd >= 3:
                times[name].append(kept)
    return times


def _take_out(name: str, dbg, model) -> None:
    """Remove one part of `dbg`'s work (after its first step, once its writer and hooks exist)."""
    s = dbg.session
    if name == "no writer":
        dbg._writer.submit = lambda *a, **k: None
    elif name == "no backward":
        s.prepare_backward = lambda *a, **k: None
        s.finish_backward = lambda *a, **k: None
        _remove_param_grad_hooks(dbg, model)
    elif name == "no param grads":
        _remove_param_grad_hooks(dbg, model)
    elif name == "no dataflow":
        s.note_consumer = lambda *a: None
        s.note_producer = lambda *a, **k: None
    elif name == "no counters":
        class OneCounter:
            def next(self, key):
                return 0

            def peek(self, key):
                return 0

            def reset(self):
                pass

        s.counters = OneCounter()
        s.filter.note_start = lambda name: None
    elif name == "no stacks":
        s.want_stack = False
    elif name == "no items":
        s.items.list_items = lambda values, prefix: [None] * len(values)
        s.items.item_at = lambda v, prefix, slot: None


def _remove_param_grad_hooks(dbg, model) -> None:
    """The parameter-gradient hooks: every handle but those in the modules' own hook dicts."""
    module_dicts = _module_hook_dicts(model)
    for h in dbg._modules.handles:
        if id(h.hooks_dict_ref()) not in module_dicts:
            h.remove()


def _module_hook_dicts(model) -> set:
    ids = set()
    for m in model.modules():
        ids.add(id(m._forward_pre_hooks))
        ids.add(id(m._forward_hooks))
    return ids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--level", default="L0", choices=("L0", "mix"))
    p.add_argument("--quick", action="store_true", help="20 rounds")
    p.add_argument("--dump-root", metavar="DIR", help="where the dumps go (default: the system's temporary folder)")
    p.add_argument("--fine", action="store_true", help="the finer set-ups (see above) in place of the main ones")
    p.add_argument("--shape", default="small", choices=tuple(SHAPES),
                   help="the benchmarks' small or d=256 GPT, the small Llama-style decoder, or transformers' models")
    args = p.parse_args()
    if args.quick:
        args.rounds = 20
    sys.path.insert(0, ROOT)
    import tbprobe.collector.pytorch.module_hooks as module_hooks
    import tbprobe.collector.pytorch.param_grads as param_grads

    setups = FINE if args.fine else SETUPS
    call_start, own_parameters = module_hooks._c_call_start, param_grads.own_parameters
    alias = module_hooks.alias_inputs
    shape = SHAPES[args.shape]
    runs = {name: gpt_training(shape) for name in setups}
    tmp = tempfile.mkdtemp(prefix="bench_breakdown_", dir=args.dump_root)
    try:
        dbgs = {name: _debugger(tmp, name, args.level) for name in setups if name != "none"}
        def before(name: str) -> None:
            # the input shares and a module's parameter list come from module-level functions: taken out only
            # around that set-up's steps (without call_start, the views' fallback is taken out too)
            no_shares = name in ("no backward", "no shares")
            module_hooks._c_call_start = None if no_shares else call_start
            module_hooks.alias_inputs = (lambda a, k: None) if no_shares else alias
            param_grads.own_parameters = (lambda m: ()) if name == "no param items" else own_parameters

        def after_first(name: str) -> None:
            if name in dbgs:
                _take_out(name, dbgs[name], runs[name][0])

        times = paired_rounds(setups, runs, dbgs, args.rounds, before=before, after_first=after_first)
        module_hooks._c_call_start, param_grads.own_parameters = call_start, own_parameters
        module_hooks.alias_inputs = alias
        for dbg in dbgs.values():
            dbg.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = times["none"]
    full = statistics.median(t / b for t, b in zip(times["full"], base))
    model = {"llama": "Llama", "gpt": "GPT"}.get(shape.get("model", "gpt"), "transformers' " + shape["model"][3:])
    print(f"{args.shape} {model}, {args.level}, {args.rounds} rounds")
    print(f"{'set-up':<14} {'step ms':>8} {'ratio':>7} {'saved (of the added time)':>26}")
    for name in setups:
        r = statistics.median(t / b for t, b in zip(times[name], base))
        saved = "" if name in ("none", "full") else f"{(full - r) / (full - 1):>25.0%}"
        print(f"{name:<14} {statistics.median(times[name]) * 1e3:>8.2f} {r:>6.2f}x {saved}")


if __name__ == "__main__":
    main()
