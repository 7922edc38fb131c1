"""The monitor's output for one rank, written by a background thread: TensorBoard event files (through
TensorBoard's own ``EventFileWriter``), the anomaly list (``anomalies.json``) and the tensor shapes
(``monitor_meta.json``), all in ``<output>/rank<R>``.

The training thread only hands over a host array per step; protobuf building, anomaly scanning and file writes
happen here. A failure is logged and counted, never raised: the training run matters more than its monitor.
"""
import json
import logging
import os
import queue
import threading
import time
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from tbprobe.monitor.anomaly import Anomaly, AnomalyDetector
from tbprobe.monitor.config import AlertRule
from tbprobe.monitor.tags import anomaly_tag

__all__ = ["MonitorWriter", "ANOMALY_FILE", "META_FILE", "NORM_ONLY_METRICS"]

_log = logging.getLogger("tbprobe.monitor")

ANOMALY_FILE = "anomalies.json"
META_FILE = "monitor_meta.json"
# Kept in the JSON list; past that only the count grows (every anomaly is also an event in the run, which the
# dashboard reads). Each kept one is a small object (~0.2 kB; its JSON entry is made as the list is written): the
# list costs a few MB at most, and rewriting it whole (every ANOMALY_WRITE_SECS while it grows) a fraction of a
# second. (100 000 entries held as JSON dicts were ~100 MB, and each rewrite took seconds.)
MAX_ANOMALIES = 20_000
NORM_ONLY_METRICS = ("update_ratio",)  # metrics whose only meaningful statistic is the norm column
# The anomaly list is rewritten whole (readers never see half of it): at most this often, and at flush and close.
# (Rewritten at every step with an anomaly, a long run's list made each step slower than the last.)
ANOMALY_WRITE_SECS = 2.0
_STOP = object()


def _atomic_json(path: str, data) -> None:
    """Write `data` as JSON, whole or not at all. A dict is written indented; anything else is taken for a list of
    entries (any iterable, read once: each entry is made as it is written) and written one entry a line."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        if isinstance(data, dict):
            json.dump(data, f, indent=1, allow_nan=False)
        else:
            sep = "[\n"
            for entry in data:
                f.write(sep)
                f.write(json.dumps(entry, allow_nan=False))
                sep = ",\n"
            f.write("[]\n" if sep == "[\n" else "\n]\n")
    os.replace(tmp, path)  # readers never see a half-written file


class MonitorWriter:
    def __init__(
        self,
        run_dir: str,
        ops: Sequence[str],
        rules: Sequence[AlertRule],
        rank: int,
        info: Optional[dict] = None,
        queue_size: int = 64,
        non_finite: str = "change",
        quiet: Iterable[str] = (),
    ):
        self.run_dir = run_dir
        self.ops = list(ops)
        self.rank = rank
        self.errors = 0
        self.anomaly_count = 0
        self._anomalies: List[Anomaly] = []
        self._meta: Dict[str, list] = {}
        self._info = dict(info or {})
        # (quiet: series that may be non-finite by design, anomaly.py; copied, it is the training thread's)
        self._detector = AnomalyDetector(rules, ops, rank, non_finite, list(quiet))
        self._queue: "queue.Queue" = queue.Queue(maxsize=queue_size)
        self._closed = False
        self._anomalies_dirty = False
        self._anomalies_at = 0.0   # (time.monotonic() of the last write)
        os.makedirs(run_dir, exist_ok=True)
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._events = EventFileWriter(run_dir, max_queue_size=256, flush_secs=5)
        _atomic_json(os.path.join(run_dir, ANOMALY_FILE), [])
        self._write_meta()
        self._thread = threading.Thread(target=self._loop, name=f"tbprobe-monitor-writer-rank{rank}", daemon=True)
        self._thread.start()

    # -- training thread -------------------------------------------------------------------------------------
    def submit(self, step: int, keys: List[str], values: np.ndarray, shapes: Optional[Dict[str, list]] = None,
               quiet: Sequence[str] = ()):
        """Queue one step (blocks only when the writer is 64 steps behind: back-pressure beats unbounded memory).
        `shapes`: those of series new this step; `quiet`: new series that may be non-finite by design."""
        if self._closed:
            return
        self._queue.put((step, keys, values, shapes or {}, list(quiet)))

    def flush(self) -> None:
        """Wait until everything submitted so far is on disk."""
        if self._closed:
            return
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout=60)

    def close(self) -> None:
        if self._closed:
            return
        self._queue.put(_STOP)
        self._thread.join(timeout=60)
        self._closed = True
        try:
            self._events.close()
        except Exception as exc:  # noqa: BLE001 - closing must not raise into user code
            _log.warning("tbprobe monitor: closing the event file failed: %s", exc)

    # -- writer thread ---------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._safe(self._write_anomalies)
                self._safe(self._events.flush)
                return
            if isinstance(item, threading.Event):
                self._safe(self._write_anomalies)
                self._safe(self._events.flush)
                item.set()
                continue
            self._safe(self._write_step, *item)

    def _safe(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the monitor never takes the run down
            self.errors += 1
            if self.errors <= 5:
                _log.warning("tbprobe monitor: writing failed (%s: %s)", type(exc).__name__, exc)

    def _write_step(self, step: int, keys: List[str], values: np.ndarray, shapes: Dict[str, list],
                    quiet: Sequence[str] = ()) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        if quiet:
            self._detector.mark_quiet(quiet)
        if len(set(keys)) < len(keys):
            # a module called more than once in the step (a shared block, a reused activation): its last call's
            # values, as the reference keeps them; two values of one tag at one step also made the anomaly rules
            # compare one call with the other's history
            last = {k: i for i, k in enumerate(keys)}
            rows = sorted(last.values())
            keys, values = [keys[i] for i in rows], values[rows]
        summary = summary_pb2.Summary()
        add = summary.value.add
        for key, row in zip(keys, values.tolist()):
            norm_only = key.rsplit("/", 1)[-1] in NORM_ONLY_METRICS
            for op, v in zip(self.ops, row):
                if norm_only and op != "norm":
                    continue
                add(tag=f"{key}_{op}", simple_value=v)  # NaN and inf are valid float32 protobuf values
        anomalies = self._detector.scan(step, keys, self._scannable(keys, values))
        for a in anomalies:
            add(tag=anomaly_tag(a.rule, a.tag), simple_value=a.value)
        now = time.time()
        self._events.add_event(event_pb2.Event(wall_time=now, step=step, summary=summary))
        if anomalies:
            self.anomaly_count += len(anomalies)
            room = MAX_ANOMALIES - len(self._anomalies)
            self._anomalies.extend(anomalies[: max(room, 0)])
            self._anomalies_dirty = True
            if time.monotonic() - self._anomalies_at >= ANOMALY_WRITE_SECS:
                self._write_anomalies()
            if self.anomaly_count == len(anomalies):
                _log.warning("tbprobe monitor: %s", anomalies[0].message())
        new = {k: v for k, v in shapes.items() if k not in self._meta}
        if new:
            self._meta.update(new)
            self._write_meta()

    def _write_anomalies(self) -> None:
        if self._anomalies_dirty:
            self._anomalies_dirty = False
            self._anomalies_at = time.monotonic()
            _atomic_json(os.path.join(self.run_dir, ANOMALY_FILE), (a.to_json() for a in self._anomalies))

    def _scannable(self, keys: List[str], values: np.ndarray) -> np.ndarray:
        """The values to scan: columns a norm-only metric leaves empty (NaN) are not anomalies."""
        rows = [i for i, k in enumerate(keys) if k.rsplit("/", 1)[-1] in NORM_ONLY_METRICS]
        if not rows:
            return values
        values = values.copy()
        cols = [j for j, op in enumerate(self.ops) if op != "norm"]
        values[np.ix_(rows, cols)] = 0.0
        return values

    def _write_meta(self) -> None:
        data = dict(self._info)
        data.update({"rank": self.rank, "ops": self.ops, "shapes": self._meta})
        _atomic_json(os.path.join(self.run_dir, META_FILE), data)
