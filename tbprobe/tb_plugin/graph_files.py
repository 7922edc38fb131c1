"""Opened graph files, cached by identity (path, mtime, size): an unchanged file is parsed once, a changed one
is read afresh, and at most a few files stay open (least recently used are closed)."""
import os
import threading
from collections import OrderedDict
from typing import Optional, Union

from tbprobe.tb_plugin.catalog import DB_SUFFIX
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tbprobe.tb_plugin.sqlite_ro import file_identity
from tbprobe.tb_plugin.vis_json_store import VisGraphFile

__all__ = ["GraphFile", "GraphFiles"]

GraphFile = Union[DbGraphFile, VisGraphFile]


# What the open files may hold together, by their own estimates (their indexes and derived tables), beside the
# count: four 300 MB files (100k nodes a side) took TensorBoard to 4.6 GB. The most recent file always stays.
# TBPROBE_PLUGIN_CACHE_MB overrides it.
_BUDGET_BYTES = 1024 * 2 ** 20


def _budget() -> int:
    try:
        return int(float(os.environ["TBPROBE_PLUGIN_CACHE_MB"]) * 2 ** 20)
    except (KeyError, ValueError):
        return _BUDGET_BYTES


class GraphFiles:
    def __init__(self, capacity: int = 6, budget_bytes: Optional[int] = None):
        self._capacity = capacity
        self._budget = _budget() if budget_bytes is None else budget_bytes
        self._open: "OrderedDict[tuple, GraphFile]" = OrderedDict()
        self._lock = threading.Lock()
        self._opening: dict = {}

    def get(self, path: str) -> GraphFile:
        ident = file_identity(path)
        with self._lock:
            found = self._open.get(ident)
            if found is not None:
                self._open.move_to_end(ident)
                # (indexes are built after a file is opened: the budget is checked again on each use)
                self._trim()
                return found
            lock = self._opening.setdefault(ident, threading.Lock())
        with lock:  # two requests for a new file open it once
            with self._lock:
                found = self._open.get(ident)
            if found is None:
                found = DbGraphFile(path, ident) if path.endswith(DB_SUFFIX) else VisGraphFile(path)
                with self._lock:
                    self._open[ident] = found
                    self._opening.pop(ident, None)
                    stale = [k for k in self._open if k[0] == path and k != ident]
                    for key in stale:
                        self._open.pop(key).close()
                    self._trim()
        return found

    def _trim(self) -> None:
        """Close the least recently used files while more than the capacity are open or their estimated memory is
        over the budget (the lock held); the most recent one stays whatever its size."""
        sizes = [gf.memory_estimate() for gf in self._open.values()]
        total = sum(sizes)
        while len(self._open) > 1 and (len(self._open) > self._capacity or total > self._budget):
            total -= sizes.pop(0)
            self._open.popitem(last=False)[1].close()

    def memory_estimate(self) -> int:
        with self._lock:
            return sum(gf.memory_estimate() for gf in self._open.values())

    def forget(self, path: str) -> None:
        """Drop a file from the cache (after it was rewritten by an explicit apply)."""
        real = os.path.realpath(path)
        with self._lock:
            for key in [k for k in self._open if k[0] in (path, real)]:
                self._open.pop(key).close()
