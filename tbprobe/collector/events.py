"""Per-step health scalars in TensorBoard event files, written with TensorBoard's own event writer.

Folder: <dump_path>_tb/events/<rank dir>/, beside the dump (msprobe's tools refuse a dump folder holding
anything but step folders), next to the live graph: `tensorboard --logdir <dump_path>_tb` shows both.
Tags: tbprobe/nonfinite_tensors, tbprobe/max_abs, tbprobe/records, tbprobe/hook_errors.

Each rank's file is TensorBoard's RecordWriter (its record framing and checksums) over a buffered file that stays
open, written by the collector's writer (its thread, or step() itself when async_dump is false). TensorBoard's
EventFileWriter would do the same through a thread of its own and reopen the file for every record: 0.42 ms of
CPU per small-model step in a training run, against 0.22 ms here (65 us alone). The record framing's CRC-32Cs are
computed in C (_record_writer). The file is named and begun (the file_version event) as EventFileWriter names and
begins its files.
"""
import itertools
import logging
import os
import socket
import struct
import time
from typing import Dict

__all__ = ["HealthEvents", "events_dir"]

log = logging.getLogger("tbprobe.collector")

FLUSH_SECS = 2.0   # health events reach the file at most this late (and at close)
_file_ids = itertools.count()


def events_dir(dump_path: str) -> str:
    return os.path.join(os.path.normpath(dump_path) + "_tb", "events")


class HealthEvents:
    def __init__(self, dump_path: str) -> None:
        self.dump_path = dump_path
        self._writers: Dict[str, object] = {}
        self._paths: Dict[str, str] = {}   # rank dir -> its event file
        self._flushed: Dict[str, float] = {}
        self.available = True
        self._template: tuple = (None, None)   # (Event, its tags)

    def write(self, rank_dir: str, step: int, health: Dict[str, float]) -> None:
        if not self.available:
            return
        w = self._writers.get(rank_dir)
        now = time.monotonic()
        flush = now - self._flushed.get(rank_dir, 0.0) >= FLUSH_SECS
        if w is not None and flush and not os.path.exists(self._paths[rank_dir]):
            # (the folder was deleted mid-run: a new file, not records written to a lost one; looked at when
            # flushing, at most every FLUSH_SECS)
            w.close()
            w = None
        if w is None:
            try:
                w, self._paths[rank_dir] = _open_event_file(os.path.join(events_dir(self.dump_path), rank_dir))
                self._writers[rank_dir] = w
            except ImportError:
                self.available = False
                log.warning("tbprobe: tensorboard is not installed: no health event files")
                return
        w.write(self._event(step, health))
        # a flush per step costs more than a small training step's share; TensorBoard polls every few seconds
        if flush:
            self._flushed[rank_dir] = now
            w.flush()

    def _event(self, step: int, health: Dict[str, float]) -> bytes:
        """The step's Event, serialised. One Event message is kept and refilled while the tags stay the same:
        building the four values, the summary and the event anew cost most of a write between training steps."""
        event, tags = self._template
        if tags != tuple(health):
            from tensorboard.compat.proto import event_pb2, summary_pb2

            tags = tuple(health)
            values = [summary_pb2.Summary.Value(tag=f"tbprobe/{k}") for k in tags]
            event = event_pb2.Event(summary=summary_pb2.Summary(value=values))
            self._template = (event, tags)
        event.wall_time = time.time()
        event.step = step
        for value, v in zip(event.summary.value, health.values()):
            value.simple_value = float(v)
        return event.SerializeToString()

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()


def _record_writer(f):
    """TensorBoard's RecordWriter over `f`, with the framing's CRC-32Cs computed in C (_cwrite.c) when it is built:
    TensorBoard computes them in pure Python, two thirds of a health event's cost (45 of 68 us)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    try:
        from tbprobe.collector._cwrite import masked_crc32c
    except ImportError:
        return RecordWriter(f)

    class FastCrcRecordWriter(RecordWriter):
        def write(self, data: bytes) -> None:
            # the TFRecord framing: length, its masked CRC, the data, its masked CRC (RecordWriter.write's)
            header = struct.pack("<Q", len(data))
            self._writer.write(header + struct.pack("<I", masked_crc32c(header)) + data
                               + struct.pack("<I", masked_crc32c(data)))

    return FastCrcRecordWriter(f)


def _open_event_file(logdir: str):
    from tensorboard.compat.proto import event_pb2

    os.makedirs(logdir, exist_ok=True)
    name = "events.out.tfevents.%010d.%s.%s.%s" % (time.time(), socket.gethostname(), os.getpid(), next(_file_ids))
    path = os.path.join(logdir, name)
    w = _record_writer(open(path, "wb"))
    first = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2",
                            source_metadata=event_pb2.SourceMetadata(writer="tbprobe.collector"))
    w.write(first.SerializeToString())
    w.flush()
    return w, path
