"""sql_null: None still binds as NULL (and nothing else changes) once the adapter is registered."""
import sqlite3

from tbprobe.graph_builder.sql_null import register_null_adapter


def test_none_binds_as_null_and_other_values_as_before():
    register_null_adapter()
    register_null_adapter()  # twice: still one adapter, the same behaviour
    assert (type(None), sqlite3.PrepareProtocol) in sqlite3.adapters
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (i INTEGER, r REAL, s TEXT, x)")
    rows = [(None, None, None, None), (1, 0.5, "a", b"b"), (None, 1, "", 2.5), (True, None, "None", None)]
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [list(r) for r in rows])  # lists too
    got = conn.execute("SELECT i, r, s, x, typeof(i), typeof(r), typeof(s), typeof(x) FROM t ORDER BY rowid")
    expected = [(None, None, None, None, "null", "null", "null", "null"),
                (1, 0.5, "a", b"b", "integer", "real", "text", "blob"),
                (None, 1.0, "", 2.5, "null", "real", "text", "real"),
                (1, None, "None", None, "integer", "null", "text", "null")]
    assert got.fetchall() == expected * 2
    assert conn.execute("SELECT count(*) FROM t WHERE i IS ?", (None,)).fetchone() == (4,)
