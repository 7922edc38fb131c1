"""Is a second core free right now? A rank's row work is shared with a forked helper process only when one is:
on a machine whose cores are already busy with other work the helper adds its own costs (its temporary
database, the copy of its rows, copy-on-write faults on the shared graphs: about a third more CPU in all) and
wins nothing (100k build on 2 cores kept busy by other work: 10.9 s with the helper against 7.6-9.9 s alone).

Measured from the system's idle time (/proc/stat) while the rank's files are read and its tree is built, so
the figure is seconds old, not a minute-long load average. Where there is no /proc/stat the helper is used."""
import os
from typing import Optional, Tuple

__all__ = ["cpu_times", "idle_cores_since"]

_MIN_WINDOW = 20  # jiffies summed over all CPUs (0.2 s at the usual 100 Hz): shorter windows say nothing


def cpu_times() -> Optional[Tuple[int, int]]:
    """(idle, total) jiffies summed over all CPUs since boot, or None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != b"cpu":
        return None
    try:
        values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except ValueError:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return idle, sum(values)


def idle_cores_since(start: Optional[Tuple[int, int]]) -> Optional[float]:
    """How many cores were idle on average since `start` (a cpu_times() reading), or None when unknown (no
    reading, or too short a window to say)."""
    now = cpu_times()
    if start is None or now is None:
        return None
    idle, total = now[0] - start[0], now[1] - start[1]
    if total < _MIN_WINDOW or idle < 0:
        return None
    return idle / total * (os.cpu_count() or 1)
