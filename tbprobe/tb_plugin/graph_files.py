"""Opened graph files, cached by identity (path, mtime, size): an unchanged file is parsed once, a changed one
is read afresh, and at most a few files stay open (least recently used are closed)."""
import os
import threading
from collections import OrderedDict
from typing import Union

from tbprobe.tb_plugin.catalog import DB_SUFFIX
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tbprobe.tb_plugin.sqlite_ro import file_identity
from tbprobe.tb_plugin.vis_json_store import VisGraphFile

__all__ = ["GraphFile", "GraphFiles"]

GraphFile = Union[DbGraphFile, VisGraphFile]


class GraphFiles:
    def __init__(self, capacity: int = 6):
        self._capacity = capacity
        self._open: "OrderedDict[tuple, GraphFile]" = OrderedDict()
        self._lock = threading.Lock()
        self._opening: dict = {}

    def get(self, path: str) -> GraphFile:
        ident = file_identity(path)
        with self._lock:
            found = self._open.get(ident)
            if found is not None:
                self._open.move_to_end(ident)
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
                    while len(self._open) > self._capacity:
                        self._open.popitem(last=False)[1].close()
        return found

    def forget(self, path: str) -> None:
        """Drop a file from the cache (after it was rewritten by an explicit apply)."""
        real = os.path.realpath(path)
        with self._lock:
            for key in [k for k in self._open if k[0] in (path, real)]:
                self._open.pop(key).close()
