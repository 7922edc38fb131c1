"""Read-only opening of a ``.vis.db`` for the plugin: tbprobe.formats' opener (immutable when no writer is active,
so nothing is ever written next to the user's file), with its errors turned into HTTP 400 answers that name the
file but not the server's folders; and the identity of a file that keys every cache read from it.
"""
import os
import sqlite3

from tbprobe.errors import BusyError, FormatError
from tbprobe.formats.vis_db import open_db
from tbprobe.tb_plugin.api_error import ApiError

__all__ = ["open_readonly", "file_identity"]


def open_readonly(path: str) -> sqlite3.Connection:
    """A read-only connection usable from any thread (callers serialise use through a pool)."""
    try:
        return open_db(path, readonly=True)
    except BusyError as exc:   # (a 503 is not remembered: the next request opens the file again)
        raise ApiError(503, f"{os.path.basename(path)}: {exc.problem}; try again") from None
    except FormatError as exc:
        raise ApiError(400, f"{os.path.basename(path)}: cannot be read as a graph database ({exc.problem})") from None


def file_identity(path: str) -> tuple:
    """What changes when the file (or its write-ahead log) changes: the cache key of everything read from it."""
    st = os.stat(path)
    ident = (path, st.st_mtime_ns, st.st_size)
    try:
        wal = os.stat(path + "-wal")
        ident += (wal.st_mtime_ns, wal.st_size)
    except OSError:
        pass
    return ident
