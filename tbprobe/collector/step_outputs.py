"""What follows a written step beside the dump: its health scalars in the event file and the live graph's rebuild.

Fed by the writer's on_step_written (its thread with async_dump, else step() itself). The live graph costs about
as much as a small step to build, so it is rebuilt at most once per interval, and the last step at close.
Framework-neutral.
"""
import logging
import os
import time
from typing import Optional

from tbprobe.collector.events import HealthEvents
from tbprobe.collector.guard import HookGuard
from tbprobe.collector.live_graph import LiveGraph
from tbprobe.collector.writer import disk_full

__all__ = ["StepOutputs", "LIVE_SHARE_WAIT"]

log = logging.getLogger("tbprobe.collector")

# the live graph's rebuilds take at most about 1 / (1 + LIVE_SHARE_WAIT) of the time (on_written)
LIVE_SHARE_WAIT = 9.0


class StepOutputs:
    def __init__(self, dump_path: str, guard: HookGuard, live: bool, interval: float) -> None:
        self.guard = guard
        self.events = HealthEvents(dump_path)
        self.live: Optional[LiveGraph] = LiveGraph(dump_path) if live else None
        self.interval = interval
        self.closing = False          # set by the debugger's close: the step written now is brought in at once
        self._live_at = -1e9          # (time.monotonic() when the last rebuild ended)
        self._live_wait = interval    # until the next one
        self._skipped: Optional[tuple] = None   # (out_dir, step) of a written step the live graph lacks

    def on_written(self, out_dir: str, step: int, health: dict, newest: bool) -> None:
        health = dict(health, hook_errors=float(self.guard.total))
        try:
            self.events.write(os.path.basename(out_dir), step, health)
        except Exception as exc:
            self.guard.report("event file", exc)
        if self.live is None:
            return
        now = time.monotonic()
        if (newest or self.closing) and (self.closing or now - self._live_at >= self._live_wait):
            self._skipped = None
            self._update_live(out_dir, step)
            # Timed from the rebuild's end, and at least LIVE_SHARE_WAIT times what it took: a graph whose
            # rebuild outlasted the interval (30k nodes, 1.5 s) was rebuilt at every step, 2.8x the training time
            end = time.monotonic()
            self._live_at = end
            self._live_wait = max(self.interval, LIVE_SHARE_WAIT * (end - now))
        else:
            self._skipped = (out_dir, step)     # brought in at close if no later step is

    def _update_live(self, out_dir: str, step: int) -> None:
        try:
            self.live.update(out_dir, step)
        except Exception as exc:
            if not disk_full(exc):
                self.guard.report("live graph", exc)
                return
            self.disk_full()

    def disk_full(self) -> None:
        """The disk is full (the live graph's write or the dump's failed): the dump comes first, so the live graph
        (rebuilt from the dump by `tbprobe graph` at any time) goes, its files with it, and the room they and a
        failed transaction's journal took is the dump's again."""
        if self.live is None:
            return
        log.warning("tbprobe: the disk under %s is full: the live graph is switched off and its database "
                    "removed, so the dump keeps the room", self.live.dir)
        self.live.remove()
        self.live = None

    def close(self) -> None:
        """After the writer's last step: the step the live graph skipped, then both files closed."""
        self.closing = True
        if self.live is not None and self._skipped is not None:
            self._update_live(*self._skipped)
            self._skipped = None
        self.events.close()
        if self.live is not None:
            self.live.close()
