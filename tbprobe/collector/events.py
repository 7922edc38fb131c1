"""Per-step health scalars in TensorBoard event files, written with TensorBoard's own event writer.

Folder: <dump_path>_tb/events/<rank dir>/, beside the dump (msprobe's tools refuse a dump folder holding
anything but step folders), next to the live graph: `tensorboard --logdir <dump_path>_tb` shows both.
Tags: tbprobe/nonfinite_tensors, tbprobe/max_abs, tbprobe/records, tbprobe/hook_errors.
"""
import logging
import os
import time
from typing import Dict

__all__ = ["HealthEvents", "events_dir"]

log = logging.getLogger("tbprobe.collector")

FLUSH_SECS = 2.0   # health events reach the file at most this late (and at close)


def events_dir(dump_path: str) -> str:
    return os.path.join(os.path.normpath(dump_path) + "_tb", "events")


class HealthEvents:
    def __init__(self, dump_path: str) -> None:
        self.dump_path = dump_path
        self._writers: Dict[str, object] = {}
        self._flushed: Dict[str, float] = {}
        self.available = True

    def write(self, rank_dir: str, step: int, health: Dict[str, float]) -> None:
        if not self.available:
            return
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            self.available = False
            log.warning("tbprobe: tensorboard is not installed: no health event files")
            return
        w = self._writers.get(rank_dir)
        if w is None:
            w = EventFileWriter(os.path.join(events_dir(self.dump_path), rank_dir))
            self._writers[rank_dir] = w
        values = [summary_pb2.Summary.Value(tag=f"tbprobe/{k}", simple_value=float(v)) for k, v in health.items()]
        w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values)))
        # a flush per step costs more than a small training step's share; TensorBoard polls every few seconds
        now = time.monotonic()
        if now - self._flushed.get(rank_dir, 0.0) >= FLUSH_SECS:
            self._flushed[rank_dir] = now
            w.flush()

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
