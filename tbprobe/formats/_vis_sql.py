"""Helpers shared by the .vis.db writer, reader and live writer: opening (with the read-only fallback), the
tb_config row, INSERT statements, schema creation and tbprobe_meta rows."""
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from tbprobe.errors import BusyError, FormatError
from tbprobe.formats.vis_schema import (
    CONFIG_COLUMNS,
    EDGE_COLUMNS,
    FINDING_COLUMNS,
    INDEX_STATEMENTS,
    NODE_COLUMNS,
    NODE_EXT_COLUMNS,
    TABLE_STATEMENTS,
    TBPROBE_SCHEMA_VERSION,
    TBPROBE_TABLE_STATEMENTS,
)

__all__ = ["open_db", "config_row", "create_schema", "meta_rows", "writer_name", "INSERT_NODE", "INSERT_STACK",
           "INSERT_CONFIG", "INSERT_NODE_EXT", "INSERT_FINDING", "INSERT_EDGE", "INSERT_META"]

PathLike = Union[str, "os.PathLike[str]"]


def _uri(path: Path, query: str) -> str:
    return "file:" + quote(str(path.resolve())) + "?" + query


# (a WAL reader waits only while a writer runs recovery or closes the database: milliseconds. The plugin's run list
# opens every file, and SQLite's default of 5 s a file made it hang on each exclusively held one)
READ_WAIT_S = 0.5


def _locked(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or "database is locked" in str(exc)


def _check_sqlite(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()


def open_db(path: PathLike, readonly: bool = True) -> sqlite3.Connection:
    """Open a .vis.db (or any SQLite file) and check that it is one.

    Read-only opens: when no `-wal` file is beside the database nobody is writing it, so it is opened
    `mode=ro&immutable=1` (no locks, and no -wal/-shm files left in the user's folder; open again to see later
    writes). When a `-wal` file exists a writer may be active (e.g. a LiveVisDb during training): `mode=ro` reads
    its committed pages; in a folder the process cannot write that fails (SQLite cannot create the -shm file), and
    the open falls back to `mode=ro&immutable=1`, which reads the main file as it is. A read-only open waits at
    most READ_WAIT_S for a lock: a WAL reader is blocked only for the moments a writer recovers or closes the
    database, or by a writer in `locking_mode=EXCLUSIVE` until it closes (its pages are in its -wal file). That
    one is an error (BusyError), not the fallback: the main file alone would be an older graph, or half of one.
    A corrupt or non-SQLite file raises FormatError naming it, a locked one BusyError."""
    p = Path(path)
    if not p.exists():
        raise FormatError(p, "no such database file")
    if not p.is_file():
        raise FormatError(p, "expected a .vis.db file, found a folder" if p.is_dir() else
                          "expected a .vis.db file, found something that is not a regular file (a FIFO, a device "
                          "or a socket)")
    if not readonly:
        attempts = [str(p)]
    elif Path(f"{p}-wal").exists():
        attempts = [_uri(p, "mode=ro"), _uri(p, "mode=ro&immutable=1")]
    else:
        attempts = [_uri(p, "mode=ro&immutable=1")]
    last: Optional[sqlite3.Error] = None
    for target in attempts:
        conn = None
        try:
            conn = sqlite3.connect(target, uri=readonly, check_same_thread=False,
                                   timeout=READ_WAIT_S if readonly else 5.0)
            _check_sqlite(conn)
            return conn
        except sqlite3.OperationalError as exc:  # cannot open / read-only folder: try the next way
            last = exc
            if conn is not None:
                conn.close()
            if readonly and _locked(exc):
                raise BusyError(p, "locked by another program (one writing it in SQLite's locking_mode=EXCLUSIVE "
                                  "holds it until it closes the file)") from None
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            if conn is not None:
                conn.close()
            raise FormatError(p, f"not a readable SQLite database ({exc})") from None
    raise FormatError(p, f"cannot open the database ({last})")


def _text(value: Any) -> Optional[str]:
    """A tb_config value as the reference stores it: strings as they are, other values as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


def config_row(
    graph_type: str,
    task: Optional[str],
    tool_tip: Any,
    micro_steps: Optional[int],
    overflow_check: Any,
    node_colors: Any,
    rank_list: Any,
    step_list: Any,
) -> Tuple[Any, ...]:
    """The one tb_config row ('1', ...). JSON-valued fields may be given as Python objects or as JSON text."""
    return (
        "1",
        graph_type,
        task,
        _text(tool_tip),
        None if micro_steps is None else int(micro_steps),
        None if overflow_check is None else int(bool(overflow_check)),
        _text(node_colors) if node_colors is not None else "null",
        _text(list(rank_list) if isinstance(rank_list, (tuple, range)) else rank_list),
        _text(list(step_list) if isinstance(step_list, (tuple, range)) else step_list),
    )


def _insert_sql(table: str, columns: Sequence[str], verb: str = "INSERT") -> str:
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


INSERT_NODE = _insert_sql("tb_nodes", NODE_COLUMNS)
INSERT_STACK = "INSERT OR REPLACE INTO tb_stack (id, stack_info) VALUES (?, ?)"
INSERT_CONFIG = _insert_sql("tb_config", CONFIG_COLUMNS, "INSERT OR REPLACE")
INSERT_NODE_EXT = _insert_sql("tbprobe_node_ext", NODE_EXT_COLUMNS, "INSERT OR REPLACE")
INSERT_FINDING = _insert_sql("tbprobe_findings", FINDING_COLUMNS, "INSERT OR REPLACE")
INSERT_EDGE = _insert_sql("tbprobe_edges", EDGE_COLUMNS)
INSERT_META = "INSERT OR REPLACE INTO tbprobe_meta (key, value) VALUES (?, ?)"


def create_schema(conn: sqlite3.Connection, with_indexes: bool) -> None:
    for stmt in TABLE_STATEMENTS + TBPROBE_TABLE_STATEMENTS:
        conn.execute(stmt)
    if with_indexes:
        for stmt in INDEX_STATEMENTS:
            conn.execute(stmt)


def writer_name() -> str:
    from tbprobe import __version__

    return f"tbprobe {__version__}"


def meta_rows(extra: Optional[dict] = None) -> list:
    rows = {
        "schema_version": str(TBPROBE_SCHEMA_VERSION),
        "writer": writer_name(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    rows.update(extra or {})
    return list(rows.items())
