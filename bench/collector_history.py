"""One collector case at several commits: how tbprobe's cost moved over its history, each commit beside the others.

    .venv/bin/python bench/collector_history.py [COMMIT ...] [--runs 2] [--case "small L0 statistics"]
        [--dump-root DIR]

Each commit (default: 20bff8a, the code collector_ceiling.py was written for in session 10, and HEAD) is cloned
from this checkout into a temporary folder and its C extensions built there; "." is this checkout as it is. Then
each commit's own bench/collector_overhead.py runs the case with tbprobe alone (no msprobe) in `--runs` rounds, the
commits taking turns in each round, so that a drift in the machine's speed falls on all of them alike. Prints each
commit's ratios to no tool and their median. Works back to the commits whose collector_overhead.py has --only and
--dump-root (20bff8a and later).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RATIO = re.compile(r"^(\d+(?:\.\d+)?)x$")


def _git(*args: str, cwd: str = ROOT) -> str:
    # (TZ: the table's dates, git's format-local, are in UTC whatever the machine's zone)
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, TZ="UTC")).stdout.strip()


def checkout(commit: str, into: str) -> str:
    """A clone of this repository at `commit` under `into`, its extensions built; "." is ROOT itself."""
    if commit == ".":
        return ROOT
    folder = os.path.join(into, commit)
    _git("clone", "-q", ROOT, folder)
    _git("checkout", "-q", commit, cwd=folder)
    built = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=folder,
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"{commit}: the extensions did not build:\n{built.stderr[-2000:]}")
    return folder


def ratio(folder: str, case: str, dump_root: Optional[str]) -> float:
    """tbprobe's ratio to no tool for `case`, from the collector_overhead.py of the checkout at `folder`."""
    # (a path that is not there: collector_overhead.py skips msprobe when its python is absent)
    cmd = [sys.executable, "bench/collector_overhead.py", "--only", case, "--msprobe-python",
           os.path.join(folder, "no-msprobe")]
    if dump_root:
        cmd += ["--dump-root", dump_root]
    out = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith(case):
            # the last "N.NNx" on the case's row is tbprobe's (msprobe's reads "nanx" with no msprobe given)
            found = [float(m.group(1)) for tok in line.split() if (m := _RATIO.match(tok))]
            if found:
                return found[-1]
    raise SystemExit(f"{folder}: no ratio for {case!r} in its output:\n{(out.stdout + out.stderr)[-2000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("commits", nargs="*", default=["20bff8a", "HEAD"])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--case", default="small L0 statistics")
    p.add_argument("--dump-root", metavar="DIR", help="passed on to collector_overhead.py (e.g. /dev/shm)")
    args = p.parse_args()
    # (a commit named twice would share one folder and one list of ratios, its row printed twice over both)
    twice = sorted({c for c in args.commits if args.commits.count(c) > 1})
    if twice:
        p.error(f"commit named more than once: {', '.join(twice)}")
    tmp = tempfile.mkdtemp(prefix="bench_history_")
    try:
        try:
            folders = {c: checkout(c, tmp) for c in args.commits}
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"collector_history: {' '.join(e.cmd)} failed: {(e.stderr or '').strip()}") from None
        ratios: Dict[str, List[float]] = {c: [] for c in args.commits}
        for rnd in range(args.runs):
            for c in args.commits:
                ratios[c].append(ratio(folders[c], args.case, args.dump_root))
                print(f"round {rnd + 1}: {c} {ratios[c][-1]:.2f}x", flush=True)
        print(f"\n{args.case}, tbprobe / no tool:")
        print(f"{'commit':<10} {'date (UTC)':<17} {'ratios':<24} {'median':>7}  subject")
        for c in args.commits:
            # (each folder has its commit checked out, so its HEAD is that commit)
            info = _git("log", "-1", "--date=format-local:%Y-%m-%d %H:%M", "--format=%h\t%ad\t%s", "HEAD",
                        cwd=folders[c])
            short, date, subject = info.split("\t", 2)
            shown = " ".join(f"{r:.2f}" for r in ratios[c])
            print(f"{short:<10} {date:<17} {shown:<24} {statistics.median(ratios[c]):>6.2f}x  {subject[:70]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
