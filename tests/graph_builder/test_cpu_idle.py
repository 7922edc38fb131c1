"""cpu_idle: the idle-core reading that decides whether one rank's rows are shared with a helper process."""
import os

import pytest

from tbprobe.graph_builder import cpu_idle, engine
from tbprobe.graph_builder import run as run_mod
from tbprobe.graph_builder.run import run_graph
from tests.graph_builder import golden

linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat here")


@linux_only
def test_idle_cores_over_a_window():
    start = cpu_idle.cpu_times()
    assert start is not None and 0 <= start[0] <= start[1]
    # a window made 10000 jiffies longer, half of them idle: about half of the cores idle
    long_ago = (start[0] - 5000, start[1] - 10000)
    cores = os.cpu_count() or 1
    assert cpu_idle.idle_cores_since(long_ago) == pytest.approx(cores / 2, rel=0.05)
    assert cpu_idle.idle_cores_since((start[0] - 10000, start[1] - 10000)) == pytest.approx(cores, rel=0.05)


@linux_only
def test_no_reading_or_too_short_a_window_says_nothing():
    assert cpu_idle.idle_cores_since(None) is None
    now = cpu_idle.cpu_times()
    assert cpu_idle.idle_cores_since((now[0] + 10 ** 9, now[1] - 10)) is None  # idle went backwards: unknown
    assert cpu_idle.idle_cores_since(now) is None or cpu_idle.idle_cores_since(now) >= 0


def test_unreadable_proc_stat(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("no such file")

    monkeypatch.setattr(cpu_idle, "open", refuse, raising=False)
    assert cpu_idle.cpu_times() is None
    assert cpu_idle.idle_cores_since((0, 0)) is None


@pytest.mark.parametrize("text,expected", [(b"cpu  10 0 5 100 3 0 0 0 0 0\n", (103, 118)),
                                           (b"cpu  1 2 3 4\n", (4, 10)),
                                           (b"intr 5 6 7 8 9\n", None), (b"cpu 1 x 3 4 5\n", None),
                                           (b"", None)])
def test_proc_stat_line(monkeypatch, tmp_path, text, expected):
    fake = tmp_path / "stat"
    fake.write_bytes(text)
    real_open = open
    monkeypatch.setattr(cpu_idle, "open", lambda path, mode="r": real_open(fake, mode), raising=False)
    assert cpu_idle.cpu_times() == expected


@pytest.mark.parametrize("idle,splits", [(0.0, False), (0.4, False), (0.6, True), (None, True)])
def test_helper_only_when_a_core_was_idle(tmp_path, monkeypatch, idle, splits):
    """run_graph shares one rank's rows with a helper only when at least SPLIT_IDLE cores were idle while the
    files were read (or when that is unknown); the database is the same either way."""
    if splits and (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: run_graph never splits")
    assert 0.4 < run_mod.SPLIT_IDLE < 0.6  # the cases above sit on either side of it
    monkeypatch.setattr(engine, "SPLIT_MIN_NODES", 0)
    monkeypatch.setattr(engine, "BUILD_SPLIT_MIN_NODES", 0)
    monkeypatch.setattr(engine, "_BLOCK", 3)
    monkeypatch.setattr(engine, "idle_cores_since", lambda start: idle)
    dealt = []
    real_deal = engine._deal
    monkeypatch.setattr(engine, "_deal", lambda nodes, share: dealt.append(1) or real_deal(nodes, share))
    case = str(golden.INPUTS / "npu_stat")
    split = run_graph(case, None, str(tmp_path / "a"), parallel=True, progress=False)
    assert bool(dealt) == splits
    serial = run_graph(case, None, str(tmp_path / "b"), parallel=False, progress=False)
    assert golden.differences(split.path, serial.path) == []
