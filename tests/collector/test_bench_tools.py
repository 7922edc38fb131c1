"""The collector's measuring tools in bench/ still run against today's internals.

collector_breakdown.py and collector_ceiling.py take parts out of a debugger by replacing its private attributes
(the writer's submit, the session's backward hooks, the items): a renamed internal would break them silently only
when someone next measures. One round each, with the dumps in the test's folder; the figures are not judged
(timing on a shared machine), only that every set-up ran, printed a ratio and raised no error in tbprobe's hooks.
"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW = re.compile(r"^(?P<name>[a-z +]+?)\s+(?:(?P<ms>\d+\.\d+)\s+)?(?P<ratio>\d+\.\d+)x")


def _run(script: str, *args: str, tmp_path) -> dict:
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), "--rounds", "1",
                           "--dump-root", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # a set-up whose stand-in lacks an internal the collector calls would still print a figure: the collector
    # counts the error and goes on, so its message is the only sign
    assert "tbprobe: error" not in proc.stderr, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group("name").strip()] = float(m.group("ratio"))
    assert os.listdir(tmp_path) == [], "the tool left its dumps behind"
    return rows


def test_breakdown_runs_every_setup(tmp_path):
    rows = _run("collector_breakdown.py", tmp_path=tmp_path)
    assert set(rows) == {"none", "full", "no writer", "no backward", "no stacks", "no items"}
    assert rows["none"] == 1.0
    assert all(r > 0 for r in rows.values())


def test_breakdown_fine_runs_every_setup(tmp_path):
    rows = _run("collector_breakdown.py", "--fine", tmp_path=tmp_path)
    assert set(rows) == {"none", "full", "no shares", "no param grads", "no param items", "no dataflow",
                         "no counters"}


def test_ceiling_runs_every_setup(tmp_path):
    pytest.importorskip("tbprobe.collector._cgrad")
    rows = _run("collector_ceiling.py", tmp_path=tmp_path)
    assert set(rows) == {"none", "hooks", "floor", "ideal", "no writer", "full", "ideal + writer"}
    assert rows["none"] == 1.0
    # the one derived figure is the sum it claims to be (each ratio is printed to two decimals)
    assert rows["ideal + writer"] == pytest.approx(rows["ideal"] + rows["full"] - rows["no writer"], abs=0.015)
