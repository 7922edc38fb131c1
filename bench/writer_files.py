"""What a step's files cost the writer, on the file system that holds the dump.

    .venv/bin/python bench/writer_files.py [--steps 200 | --quick] [--dump-root DIR]

Two parts, both CPU time of the calling thread (the training thread when async_dump is false), medians:
  calls   one file-system call at a time, with 5 ms of other work (a busy loop, as a training step) before each
          round: a folder made, a new small file written, a rename, a hard link. A new inode is what costs.
  steps   the L0 collector on the small GPT of bench/collector_overhead.py, its writer's file layer
          (`_cwrite.write_files`: the step's two folders, stack/construct/dataflow.json and dump.json) timed step by
          step, alternating steps whose unchanged side files are hard links to the last step's (as shipped) with
          steps that write them anew.
The dump goes to a fresh folder under --dump-root (default: the system's temporary folder), removed at the end.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_overhead import SMALL, gpt_training, write_config  # noqa: E402

_tt = time.thread_time_ns


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def calls(root: str, rounds: int) -> dict:
    """Median thread CPU (us) of mkdir, a new file, rename and link, each round after 5 ms of other work."""
    times: dict = {"mkdir": [], "new file": [], "rename": [], "link": []}
    data = b"x" * 4000
    prev = None
    for i in range(rounds):
        _busy(0.005)
        d = os.path.join(root, f"step{i}")
        t0 = _tt()
        os.mkdir(d)
        t1 = _tt()
        with open(os.path.join(d, "side.json"), "wb") as f:
            f.write(data)
        t2 = _tt()
        os.rename(os.path.join(d, "side.json"), os.path.join(d, "dump.json"))
        t3 = _tt()
        if prev is not None:
            os.link(os.path.join(prev, "dump.json"), os.path.join(d, "linked.json"))
            times["link"].append(_tt() - t3)
        times["mkdir"].append(t1 - t0)
        times["new file"].append(t2 - t1)
        times["rename"].append(t3 - t2)
        prev = d
    return {k: statistics.median(v) / 1e3 for k, v in times.items()}


def steps(root: str, n: int) -> dict:
    """Median thread CPU (ms) of the writer's file layer per step, linking and writing the side files."""
    import types

    from tbprobe.collector import writer

    real = writer.write_files
    state = {"link": True}
    times: dict = {True: [], False: []}

    def timed(dirs, files):
        t0 = _tt()
        out = real(dirs, files)
        times[state["link"]].append(_tt() - t0)
        return out

    from tbprobe import PrecisionDebugger

    model, train_step = gpt_training(SMALL)
    dbg = PrecisionDebugger(config_path=write_config(root, "dump", "L0", "statistics", n + 1))
    dbg.start(model)
    train_step()
    dbg.stop()
    dbg.step()
    shipped = dbg._writer._side_file

    def side_file(self, out, fname, text):
        return shipped(out, fname, text) if state["link"] else (os.path.join(out, fname), text, None)

    dbg._writer._side_file = types.MethodType(side_file, dbg._writer)
    writer.write_files = timed
    try:
        for i in range(n):
            state["link"] = i % 2 == 0
            dbg.start(model)
            train_step()
            dbg.stop()
            dbg.step()
    finally:
        writer.write_files = real
        dbg.close()
    return {("linked" if k else "written"): statistics.median(v) / 1e6 for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--quick", action="store_true", help="40 steps")
    p.add_argument("--dump-root", default=None, help="where the files go (default: the temporary folder)")
    a = p.parse_args()
    n = 40 if a.quick else a.steps
    root = tempfile.mkdtemp(prefix="bench_writer_", dir=a.dump_root)
    try:
        os.mkdir(os.path.join(root, "calls"))
        c = calls(os.path.join(root, "calls"), n)
        s = steps(root, n)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"file-system calls under {a.dump_root or tempfile.gettempdir()} (thread CPU, median of {n}, "
          "after 5 ms of other work each)")
    for k, v in c.items():
        print(f"  {k:10s} {v:8.1f} us")
    print(f"the L0 writer's file layer per step, small GPT (thread CPU, median of {n // 2} steps each)")
    for k, v in s.items():
        print(f"  {k:10s} {v:8.2f} ms")


if __name__ == "__main__":
    main()
