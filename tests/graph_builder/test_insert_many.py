"""insert_many (several rows per INSERT statement) leaves a table exactly as executemany does, and a build loads
only the modules a build needs."""
import sqlite3
import subprocess
import sys

import pytest

from tbprobe.formats.vis_db import insert_many
from tests.graph_builder import synth

_TABLE = "CREATE TABLE t (id TEXT PRIMARY KEY, a INTEGER, b REAL, c TEXT)"
_ONE = "INSERT INTO t (id, a, b, c) VALUES (?, ?, ?, ?)"
_REPLACE = "INSERT OR REPLACE INTO t (id, a, b, c) VALUES (?, ?, ?, ?)"


def _rows(n, dup_every=0):
    out = []
    for i in range(n):
        key = f"k{i // 2}" if dup_every and i % dup_every == 0 else f"k{i}"
        out.append([key, i if i % 3 else None, i / 7 if i % 5 else None, "x" * (i % 11)])
    return out


def _table(fill):
    conn = sqlite3.connect(":memory:")
    conn.execute(_TABLE)
    fill(conn)
    return conn.execute("SELECT rowid, * FROM t ORDER BY rowid").fetchall()


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 64 * 3 + 7])
@pytest.mark.parametrize("sql", [_ONE, _REPLACE])
def test_same_rows_and_row_ids_as_executemany(n, sql):
    dup = 4 if sql == _REPLACE else 0  # OR REPLACE: repeated ids inside one statement, the later row wins
    rows = _rows(n, dup)
    expected = _table(lambda c: c.executemany(sql, rows))
    got = _table(lambda c: insert_many(c, sql, 4, iter(rows)))
    assert got == expected
    assert len(got) == len({r[0] for r in rows})


def test_a_row_of_another_width_fails_as_executemany_does():
    rows = _rows(70)
    bad = rows[:40] + [["short", 1]] + rows[40:]
    conn = sqlite3.connect(":memory:")
    conn.execute(_TABLE)
    with pytest.raises(sqlite3.ProgrammingError, match="bindings"):
        insert_many(conn, _ONE, 4, bad)
    # the rows before the bad one went in, in order, as executemany leaves them
    assert [r[0] for r in conn.execute("SELECT id FROM t ORDER BY rowid")] == [r[0] for r in rows[:40]]


def test_a_duplicate_key_fails_with_sqlites_error():
    rows = _rows(10) + [["k3", 1, 1.0, "dup"]]
    conn = sqlite3.connect(":memory:")
    conn.execute(_TABLE)
    with pytest.raises(sqlite3.IntegrityError):
        insert_many(conn, _ONE, 4, rows)


def test_a_build_does_not_load_the_compare_modules(tmp_path):
    """Start-up: a build imports neither the compare and match modules nor the process pools."""
    data = {f"Torch.matmul.{i}.forward": synth.api_entry() for i in range(40)}
    rank = synth.simple_rank(tmp_path / "rank0", data, {name: None for name in data})
    code = ("import sys, runpy\n"
            "sys.argv = ['x', 'graph', '-q', '-tp', sys.argv[1], '-o', sys.argv[2]]\n"
            "try:\n    runpy.run_module('tbprobe.graph_builder', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('loaded:', *[m for m in ('tbprobe.graph_builder.compare', 'tbprobe.graph_builder.match',"
            " 'concurrent.futures.process', 'multiprocessing.pool') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code, str(rank), str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "loaded:", out.stdout
    assert len(list((tmp_path / "out").glob("build_*.vis.db"))) == 1
