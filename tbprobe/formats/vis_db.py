"""The .vis.db graph database (REFERENCE.md section 2): opening, writing in one pass, and (re-exported) reading and
live writing. The schema lives in vis_schema.py, the reader in vis_db_reader.py, the live writer in live_vis_db.py.

`VisDbWriter` builds a whole database under a temporary name in one connection with bulk inserts, creates the
indexes at the end, switches the file to WAL (as the reference's files are) and renames it into place; any
exception removes the temporary file, so a half-written database never appears under the real name.
"""
import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Tuple, Union

from tbprobe.formats._vis_sql import (
    INSERT_CONFIG,
    INSERT_EDGE,
    INSERT_FINDING,
    INSERT_META,
    INSERT_NODE,
    INSERT_NODE_EXT,
    INSERT_STACK,
    config_row,
    create_schema,
    meta_rows,
    open_db,
)
from tbprobe.formats.live_vis_db import LiveVisDb
from tbprobe.formats.vis_db_reader import VisDbReader
from tbprobe.formats.vis_schema import (
    CONFIG_COLUMNS,
    INDEX_STATEMENTS,
    NODE_COLUMNS,
    NODE_EXT_COLUMNS,
    SCHEMA_INDEXES_SQL,
    SCHEMA_TABLES_SQL,
    TBPROBE_SCHEMA_VERSION,
    TBPROBE_TABLES_SQL,
)

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "SCHEMA_TABLES_SQL",
    "SCHEMA_INDEXES_SQL",
    "TBPROBE_TABLES_SQL",
    "TBPROBE_SCHEMA_VERSION",
    "NODE_COLUMNS",
    "CONFIG_COLUMNS",
    "VisDbWriter",
    "VisDbReader",
    "LiveVisDb",
    "open_db",
    "config_row",
    "insert_many",
]

# rows per statement of insert_many: within SQLite's smallest limit on bound values (999 before 3.32)
_MAX_VALUES = 999
_MAX_ROWS = 64


def insert_many(conn: sqlite3.Connection, sql: str, width: int, rows: Iterable[Sequence[Any]]) -> None:
    """conn.executemany(sql, rows) for an `INSERT ... VALUES (?, ...)` of `width` values, with several rows per
    statement: CPython's sqlite3 spends about 1 us per executed statement besides the values (100k rows: 0.1 s
    of a table's 0.3 s). The rows go in one by one, in order, as with executemany; a row of another width goes
    alone, so it fails with executemany's own error."""
    per = max(1, min(_MAX_ROWS, _MAX_VALUES // width))
    if per == 1:
        conn.executemany(sql, rows)
        return
    many = sql + (", (" + ", ".join("?" * width) + ")") * (per - 1)
    execute = conn.execute
    flat: list = []
    n = 0
    for row in rows:
        if len(row) != width:
            if n:
                conn.executemany(sql, [flat[i:i + width] for i in range(0, len(flat), width)])
                flat = []
                n = 0
            execute(sql, row)
            continue
        flat += row
        n += 1
        if n == per:
            execute(many, flat)
            flat = []
            n = 0
    if n:
        conn.executemany(sql, [flat[i:i + width] for i in range(0, len(flat), width)])

class VisDbWriter:
    """with VisDbWriter(out_path) as w: w.add_nodes(rows); w.add_stacks(rows); w.set_config(...)

    Everything goes into `<out>.tmp-<pid>` in one transaction of one connection; indexes are built at the end;
    the file is switched to WAL and renamed to `out` when the block ends without an exception.
    `sync=False` (bulk writers whose output can be rebuilt from its inputs) skips the final fsync before the
    rename: after a power loss the file may then be incomplete, never after a crash of the process.
    `page_size` (bytes, a power of two up to 65536) for bulk writers of big rows: rows of a few KB then fit in one
    page instead of a chain of overflow pages (about 2x faster inserts, a smaller file; readers do not care)."""

    def __init__(self, out_path: PathLike, sync: bool = True, page_size: Optional[int] = None):
        self.sync = sync
        self.indexed = False
        self.path = Path(out_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        self._remove_tmp()
        self.meta: dict = {}
        self.conn: Optional[sqlite3.Connection] = None
        try:
            # (inside the try: an exception raised by a signal handler right after the connect removes the file)
            self.conn = sqlite3.connect(str(self.tmp), isolation_level=None)
            # The temporary file is thrown away on failure, so it needs no journal and no fsync while filling.
            if page_size:
                self.conn.execute(f"PRAGMA page_size={int(page_size)}")  # before the first table exists
            self.conn.execute("PRAGMA journal_mode=OFF")
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("PRAGMA cache_size=-65536")
            self.conn.execute("BEGIN")
            create_schema(self.conn, with_indexes=False)
        except BaseException:
            self.abort()
            raise

    def _db(self) -> sqlite3.Connection:
        if self.conn is None:
            raise ValueError(f"{self.path}: VisDbWriter already closed")
        return self.conn

    def add_nodes(self, rows: Iterable[Sequence[Any]]) -> None:
        """tb_nodes rows: tuples in NODE_COLUMNS order."""
        insert_many(self._db(), INSERT_NODE, len(NODE_COLUMNS), rows)

    def add_stacks(self, rows: Iterable[Tuple[str, str]]) -> None:
        """tb_stack rows: (id, stack_info JSON text)."""
        self._db().executemany(INSERT_STACK, rows)

    def set_config(self, graph_type: str, task: Optional[str], tool_tip: Any, micro_steps: Optional[int],
                   overflow_check: Any, node_colors: Any, rank_list: Any, step_list: Any) -> None:
        self._db().execute(INSERT_CONFIG, config_row(graph_type, task, tool_tip, micro_steps, overflow_check,
                                                     node_colors, rank_list, step_list))

    def set_config_row(self, row: Sequence[Any]) -> None:
        """A tb_config row as stored (CONFIG_COLUMNS order), e.g. copied from another database."""
        self._db().execute(INSERT_CONFIG, tuple(row))

    def add_node_ext(self, rows: Iterable[Sequence[Any]]) -> None:
        """tbprobe_node_ext rows: (id, exec_order, subtree_precision, subtree_overflow, worst_metric, flags)."""
        insert_many(self._db(), INSERT_NODE_EXT, len(NODE_EXT_COLUMNS), rows)

    def add_findings(self, rows: Iterable[Sequence[Any]]) -> None:
        """tbprobe_findings rows: (graph_id, kind, node_name, exec_order, detail)."""
        self._db().executemany(INSERT_FINDING, rows)

    def add_edges(self, rows: Iterable[Sequence[Any]]) -> None:
        """tbprobe_edges rows: (graph_id, src, dst, dst_slot)."""
        self._db().executemany(INSERT_EDGE, rows)

    def create_indexes(self) -> None:
        """Build the indexes now instead of at close (rows added later update them as they go in): a caller that
        has to wait anyway (for another process's rows) can get most of the index work done meanwhile."""
        if not self.indexed:
            for stmt in INDEX_STATEMENTS:
                self._db().execute(stmt)
            self.indexed = True

    def set_meta(self, key: str, value: Any) -> None:
        """An extra tbprobe_meta row (schema_version, writer and created are written by close)."""
        self.meta[key] = value if isinstance(value, str) else json.dumps(value)

    def close(self) -> Path:
        """Build the indexes, commit, switch to WAL and rename into place. Returns the final path."""
        conn = self._db()
        try:
            if not self.indexed:
                for stmt in INDEX_STATEMENTS:
                    conn.execute(stmt)
            conn.executemany(INSERT_META, meta_rows(self.meta))
            conn.execute("COMMIT")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()
            self.conn = None
            if self.sync:
                # Nothing was synced while filling: flush the finished file before it takes the real name.
                fd = os.open(self.tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Drop everything written: close the connection and delete the temporary file."""
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()
            self.conn = None
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.tmp}{suffix}")

    def __enter__(self) -> "VisDbWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
