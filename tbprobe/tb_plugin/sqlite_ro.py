"""Open a ``.vis.db`` for reading without ever writing next to it.

A WAL database opened with ``mode=ro`` still creates ``-shm``/``-wal`` files beside it (in the user's log
directory), and fails in a read-only folder. When no ``-wal`` file exists nobody is writing the file, so we open
it ``immutable=1``: no locks, no side files. When a writer is active (a ``-wal`` file exists), ``mode=ro`` is the
only way to see its committed pages; if that fails (read-only folder) we fall back to immutable.
"""
import os
import sqlite3
from urllib.parse import quote

from tbprobe.tb_plugin.api_error import ApiError

__all__ = ["open_readonly", "file_identity"]


def _uri(path: str, query: str) -> str:
    return f"file:{quote(os.path.abspath(path))}?{query}"


def open_readonly(path: str) -> sqlite3.Connection:
    """A read-only connection usable from any thread (callers serialise use through a pool)."""
    queries = ["mode=ro&immutable=1"]
    if os.path.exists(path + "-wal"):
        queries.insert(0, "mode=ro")
    last: Exception = RuntimeError("not opened")
    for query in queries:
        try:
            conn = sqlite3.connect(_uri(path, query), uri=True, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError as exc:
            last = exc
    raise ApiError(400, f"{os.path.basename(path)}: cannot be read as a graph database ({last})")


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
