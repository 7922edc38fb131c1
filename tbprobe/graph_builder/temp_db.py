"""Temporary per-process databases: a worker (a rank job, or the helper sharing one rank's work) writes its rows
to disk as it makes them, and the parent streams them into the real file; nobody holds a rank in memory."""
import contextlib
import json
import sqlite3
from typing import Dict, Optional

from tbprobe.formats.vis_db import insert_many
from tbprobe.formats.vis_schema import (
    EDGE_COLUMNS,
    FINDING_COLUMNS,
    NODE_COLUMNS,
    NODE_EXT_COLUMNS,
    TABLE_STATEMENTS,
    TBPROBE_TABLE_STATEMENTS,
)

__all__ = ["RankDb", "copy_nodes", "copy_all"]


class RankDb:
    """The tables of a .vis.db without indexes, filled in one transaction; the same add_* methods as
    VisDbWriter."""

    def __init__(self, path: str):
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA page_size=65536")  # rows of a few KB: no overflow pages
        self.conn.execute("PRAGMA journal_mode=OFF")
        self.conn.execute("PRAGMA synchronous=OFF")
        # room for the primary-key index of a 100k-node half (a few MB): SQLite's default 2 MB cache re-read
        # its pages from the file again and again
        self.conn.execute("PRAGMA cache_size=-16384")
        self.conn.execute("BEGIN")
        for stmt in TABLE_STATEMENTS + TBPROBE_TABLE_STATEMENTS:
            self.conn.execute(stmt)

    def _insert(self, table: str, width: int, rows) -> None:
        insert_many(self.conn, f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * width)})", width, rows)

    def add_nodes(self, rows) -> None:
        self._insert("tb_nodes", len(NODE_COLUMNS), rows)

    def add_stacks(self, rows) -> None:
        self._insert("tb_stack", 2, rows)

    def add_node_ext(self, rows) -> None:
        self._insert("tbprobe_node_ext", len(NODE_EXT_COLUMNS), rows)

    def add_edges(self, rows) -> None:
        self._insert("tbprobe_edges", len(EDGE_COLUMNS), rows)

    def add_findings(self, rows) -> None:
        self._insert("tbprobe_findings", len(FINDING_COLUMNS), rows)

    def close(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()


def _conn_of(sink) -> Optional[sqlite3.Connection]:
    conn = getattr(sink, "conn", None)
    return conn if isinstance(conn, sqlite3.Connection) and conn.in_transaction else None


def _attached_copy(conn: sqlite3.Connection, path: str, statements, linked: Optional[Dict[str, dict]],
                   col: int) -> None:
    """Copy tables of the database at `path` into `conn`'s open transaction inside SQLite (ATTACH + INSERT ...
    SELECT): no Python object per row, about 3x faster than fetching and re-inserting. ATTACH is not allowed
    inside a transaction, so the sink's transaction is committed around it; the sinks are temporary files
    without a journal, thrown away whole on failure, so that commit changes nothing a reader could see."""
    conn.execute("COMMIT")
    conn.execute("ATTACH DATABASE ? AS part", (path,))
    try:
        conn.execute("BEGIN")
        for statement in statements:
            conn.execute(statement)
        if linked:
            name = NODE_COLUMNS[col]
            conn.executemany(f"UPDATE main.tb_nodes SET {name} = ? WHERE id = ?",
                             [(json.dumps(info), row_id) for row_id, info in linked.items()])
        conn.execute("COMMIT")
    except BaseException:
        # the sink is about to be thrown away: tidy up without hiding the original error
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("DETACH DATABASE part")
        raise
    conn.execute("DETACH DATABASE part")
    conn.execute("BEGIN")


_COPY_NODES = "INSERT INTO main.tb_nodes SELECT * FROM part.tb_nodes"
_COPY_EXT = "INSERT OR REPLACE INTO main.tbprobe_node_ext SELECT * FROM part.tbprobe_node_ext"
_COPY_REST = ("INSERT OR REPLACE INTO main.tb_stack SELECT * FROM part.tb_stack", _COPY_EXT,
              "INSERT INTO main.tbprobe_edges SELECT * FROM part.tbprobe_edges",
              "INSERT OR REPLACE INTO main.tbprobe_findings SELECT * FROM part.tbprobe_findings")


def copy_nodes(path: str, sink, linked: Optional[Dict[str, dict]] = None, col: int = 13,
               with_ext: bool = False) -> None:
    """tb_nodes rows (and with `with_ext` the tbprobe_node_ext rows) of a temporary database into `sink`, with
    matched_distributed patched from `linked`."""
    conn_out = _conn_of(sink)
    if conn_out is not None:
        _attached_copy(conn_out, path, (_COPY_NODES, _COPY_EXT) if with_ext else (_COPY_NODES,), linked, col)
        return
    conn = sqlite3.connect(path)
    try:
        if with_ext:
            sink.add_node_ext(conn.execute("SELECT * FROM tbprobe_node_ext"))
        if not linked:
            sink.add_nodes(conn.execute("SELECT * FROM tb_nodes"))
            return

        def rows():
            for row in conn.execute("SELECT * FROM tb_nodes"):
                info = linked.get(row[0])
                if info is not None:
                    row = list(row)
                    row[col] = json.dumps(info)
                yield row
        sink.add_nodes(rows())
    finally:
        conn.close()


def copy_all(path: str, sink, linked: Optional[Dict[str, dict]] = None, col: int = 13) -> None:
    conn_out = _conn_of(sink)
    if conn_out is not None:
        _attached_copy(conn_out, path, (_COPY_NODES,) + _COPY_REST, linked, col)
        return
    copy_nodes(path, sink, linked, col)
    conn = sqlite3.connect(path)
    try:
        sink.add_stacks(conn.execute("SELECT * FROM tb_stack"))
        sink.add_node_ext(conn.execute("SELECT * FROM tbprobe_node_ext"))
        sink.add_edges(conn.execute("SELECT * FROM tbprobe_edges"))
        sink.add_findings(conn.execute("SELECT * FROM tbprobe_findings"))
    finally:
        conn.close()
