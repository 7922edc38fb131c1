""".vis.db: schema byte-compatibility, golden reads of every reference database, lossless rewrite, the writer's
temporary-file discipline, read-only folders, corrupt/foreign files and the live database's atomic steps."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading

import pytest

from tbprobe.errors import FormatError
from tbprobe.formats.vis_db import (
    NODE_COLUMNS,
    SCHEMA_INDEXES_SQL,
    SCHEMA_TABLES_SQL,
    LiveVisDb,
    VisDbReader,
    VisDbWriter,
    open_db,
)
from tbprobe.formats.vis_schema import INDEX_STATEMENTS, TABLE_STATEMENTS

from .conftest import REF
from .vis_rows import node_row

REF_TABLES = ("tb_nodes", "tb_stack", "tb_config")

# case -> (graph_type, task, overflow_check, {(step, rank, side): node count}, stacks)
GOLDEN = {
    "build": ("build", "", 1, {(0, 0, "NPU"): 48}, 14),
    "cmp_stat": ("compare", "summary", 1, {(0, 0, "NPU"): 48, (0, 0, "Bench"): 44}, 26),
    "cmp_md5": ("compare", "md5", 1, {(0, 0, "NPU"): 48, (0, 0, "Bench"): 44}, 26),
    "cmp_tensor": ("compare", "all", 1, {(0, 0, "NPU"): 48, (0, 0, "Bench"): 44}, 26),
    "cmp_stat_fuzzy": ("compare", "summary", 0, {(0, 0, "NPU"): 48, (0, 0, "Bench"): 44}, 26),
    "cmp_struct": ("compare", "structure", 0, {(0, 0, "NPU"): 44, (0, 0, "Bench"): 40}, 26),
    "cmp_dist": ("compare", "summary", 0, {(0, r, s): 21 for r in (0, 1) for s in ("NPU", "Bench")}, 32),
    "multi": ("compare", "summary", 1,
              {(st, r, s): (48 if s == "NPU" else 44) for st in (0, 1) for r in (0, 1) for s in ("NPU", "Bench")}, 104),
    "merge_tp": ("build", "", 0, {(0, 0, "NPU"): 56}, 14),
}


def table_rows(conn, table):
    return conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()


def schema_of(conn, names=None):
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                        "ORDER BY type, name").fetchall()
    return [r for r in rows if names is None or r[2] in names]


# ----------------------------------------------------------------------------------------------- schema
def test_schema_is_byte_identical_to_the_reference():
    assert SCHEMA_TABLES_SQL + SCHEMA_INDEXES_SQL == (REF / "schema.sql").read_text()


def test_every_fixture_db_has_a_golden_row():
    assert sorted(GOLDEN) == sorted(p.parent.name for p in REF.glob("outputs/*/*.vis.db"))


# ------------------------------------------------------------------------------------------ golden reads
@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_reference_db_reads_back(ref_db_copies, case):
    graph_type, task, overflow, counts, n_stacks = GOLDEN[case]
    with VisDbReader(ref_db_copies[case]) as r:
        assert not r.is_tbprobe and r.schema_version is None
        cfg = r.config()
        assert (cfg["graph_type"], cfg["task"], cfg["overflow_check"], cfg["micro_steps"]) == (
            graph_type, task, overflow, 1)
        assert cfg["step_list"] == sorted({k[0] for k in counts})
        assert cfg["rank_list"] == sorted({k[1] for k in counts})
        if graph_type == "compare":
            assert cfg["node_colors"]["#C7C7C7"]["value"] == []
        assert r.graphs() == sorted(counts, key=lambda k: (k[0], k[1], k[2] != "NPU"))
        for (step, rank, side), n in counts.items():
            assert r.node_count(step, rank, side) == n
            nodes = list(r.nodes(step, rank, side, parse_json=True))
            assert len(nodes) == n
            assert [x["node_order"] for x in nodes] == sorted(x["node_order"] for x in nodes)
            root = r.root(step, rank, side)
            assert root["node_name"] == "DefaultModel" and root["up_node"] == ""
            assert nodes[-1]["node_name"] == "DefaultModel"  # post-order: root last
            # children() agrees with the sub_nodes JSON of the parent, in order
            subs = json.loads(root["sub_nodes"])
            assert [c["node_name"] for c in r.children(step, rank, side, "DefaultModel")] == subs
        assert r.node_count() == sum(counts.values())
        assert len(r.stacks()) == n_stacks


def test_cmp_stat_node_details(ref_db_copies):
    with VisDbReader(ref_db_copies["cmp_stat"]) as r:
        fc = r.node(0, 0, "NPU", "Module.layers.1.fc.Linear.forward.0", parse_json=True)
        assert fc["up_node"] == "Module.layers.1.Block.forward.0" and fc["node_order"] == 9
        assert fc["sub_nodes"] == ["Functional.linear.2.forward"]
        assert fc["matched_node_link"] == ["DefaultModel", "Module.layers.1.Block.forward.0",
                                           "Module.layers.1.fc.Linear.forward.0"]
        weight = fc["input_data"]["Module.layers.1.fc.Linear.forward.0.parameters.weight"]
        assert weight["Max"] == "0.3999595046043396" and weight["MaxRelativeErr"] == "14.287371%"
        exp = r.node(0, 0, "NPU", "Torch.exp.0.forward")
        assert exp["overflow_level"] == "critical" and exp["node_type"] == "1"
        assert r.stack(exp["stack_id"])[0].startswith("File ")
        assert r.node(0, 0, "NPU", "No.such.node") is None
        assert r.node(0, 0, "Bench", "Torch.exp.0.forward") is None  # the extra API exists on the debug side only


# -------------------------------------------------------------------------------------- lossless rewrite
@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_rewrite_preserves_every_row_and_the_schema(ref_db_copies, tmp_path, case):
    out = tmp_path / "rewritten.vis.db"
    with VisDbReader(ref_db_copies[case]) as r:
        with VisDbWriter(out) as w:
            w.add_nodes(r.conn.execute(f"SELECT {', '.join(NODE_COLUMNS)} FROM tb_nodes"))
            w.add_stacks(r.conn.execute("SELECT id, stack_info FROM tb_stack"))
            w.set_config_row(r.config_row())
        with VisDbReader(out) as again:
            for table in REF_TABLES:
                before, after = table_rows(r.conn, table), table_rows(again.conn, table)
                assert before == after and len(after) > 0
                # column types too (e.g. node_type stays TEXT, precision_index stays INTEGER/NULL)
                types = f"SELECT typeof({'), typeof('.join(c[1] for c in r.conn.execute(f'PRAGMA table_info({table})'))})"
                assert r.conn.execute(f"{types} FROM {table}").fetchall() == \
                    again.conn.execute(f"{types} FROM {table}").fetchall()
            assert schema_of(again.conn, REF_TABLES) == schema_of(r.conn, REF_TABLES)
            assert again.is_tbprobe and again.schema_version == 1
            assert again.meta()["writer"].startswith("tbprobe ")


def test_set_config_encodes_like_the_reference(tmp_path):
    out = tmp_path / "a.vis.db"
    with VisDbWriter(out) as w:
        w.add_nodes([node_row(0, 0, "NPU", i, 3) for i in range(3)])
        w.set_config("compare", "summary", {"Max diff": "差值"}, 1, True, {"#FFFCF3": {"value": [0, 0.3]}}, [0], [0, 1])
    conn = sqlite3.connect(out)
    row = conn.execute("SELECT * FROM tb_config").fetchone()
    assert row == ("1", "compare", "summary", '{"Max diff": "\\u5dee\\u503c"}', 1, 1,
                   '{"#FFFCF3": {"value": [0, 0.3]}}', "[0]", "[0, 1]")


# -------------------------------------------------------------------------------------------- the writer
def test_writer_file_is_wal_indexed_and_has_no_leftovers(tmp_path):
    out = tmp_path / "build_1.vis.db"
    out.write_bytes(b"old file")  # replaced atomically
    with VisDbWriter(out) as w:
        assert w.tmp.name == f"build_1.vis.db.tmp-{os.getpid()}" and w.tmp.exists()
        assert out.read_bytes() == b"old file"  # the real name is untouched while writing
        w.add_nodes(node_row(0, 0, "NPU", i, 50) for i in range(50))
        w.add_stacks([("NPU_0_0_0", json.dumps(["File a.py, line 1, in f, \n x"]))])
        w.set_config("build", "", None, 1, False, None, [0], [0])
        w.add_node_ext([("NPU_0_0_DefaultModel", None, 0.5, "high", 0.2, '["aligned"]')])
        w.add_findings([("NPU_0_0", "first_divergence", "Module.layers.3.Linear.forward.0", 3, "{}")])
        w.add_edges([("NPU_0_0", "a", "b", "input.0")])
        w.set_meta("source", {"debug": "/x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build_1.vis.db"]
    header = out.read_bytes()[:20]
    assert header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"  # WAL
    with VisDbReader(out) as r:
        names = {row[1] for row in schema_of(r.conn)}
        assert {f"index{i}" for i in range(1, 8)} <= names
        assert r.node_count() == 50 and r.config()["node_colors"] is None
        assert r.node_ext("NPU_0_0")["NPU_0_0_DefaultModel"]["subtree_overflow"] == "high"
        assert r.node_ext("NPU_0_1") == {}
        assert r.findings("NPU_0_0")[0]["node_name"] == "Module.layers.3.Linear.forward.0"
        assert r.edges("NPU_0_0") == [("NPU_0_0", "a", "b", "input.0")]
        assert json.loads(r.meta()["source"]) == {"debug": "/x"}


def test_writer_error_removes_the_temporary_file(tmp_path):
    out = tmp_path / "compare.vis.db"
    with pytest.raises(sqlite3.IntegrityError):
        with VisDbWriter(out) as w:
            row = node_row(0, 0, "NPU", 0, 2)
            w.add_nodes([row, row])  # duplicate primary key
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyboardInterrupt):
        with VisDbWriter(out) as w:
            w.add_nodes([node_row(0, 0, "NPU", 0, 2)])
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------- read-only folder (WAL)
def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare -rm` to make a read-only bind mount")
def test_open_from_a_read_only_folder(tmp_path):
    """A real read-only file system (a read-only bind mount in a private mount namespace; chmod does not stop
    root). With a -wal file beside it open_db tries mode=ro first, which cannot create the -shm file of the WAL
    database there, and falls back to immutable."""
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(next(REF.glob("outputs/cmp_stat/*.vis.db")), folder / "cmp.vis.db")
    (folder / "cmp.vis.db-wal").write_bytes(b"")  # as if a writer were active: open_db tries mode=ro first
    script = f"""
import sqlite3
from tbprobe.formats.vis_db import VisDbReader
p = {str(folder / 'cmp.vis.db')!r}
try:
    sqlite3.connect('file:' + p + '?mode=ro', uri=True).execute('SELECT count(*) FROM tb_nodes').fetchone()
    print('plain-ro-ok')
except sqlite3.OperationalError as e:
    print('plain-ro-failed', e)
try:
    open({str(folder / 'probe')!r}, 'w')
    print('folder-writable')
except OSError:
    print('folder-read-only')
with VisDbReader(p) as r:
    print('nodes', r.node_count(), r.config()['graph_type'])
"""
    cmd = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && {sys.executable} -c \"$S\""
    res = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], env={**os.environ, "S": script},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "folder-read-only" in res.stdout
    assert "plain-ro-failed unable to open database file" in res.stdout
    assert "nodes 92 compare" in res.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["cmp.vis.db", "cmp.vis.db-wal"]


def test_immutable_fallback_path(ref_db_copies, tmp_path, monkeypatch):
    """Where `unshare` is not allowed: with a -wal file present (a writer may be active) make the plain read-only
    open fail the way a read-only folder makes it fail, and check open_db then reads through the immutable URI
    (this checks the fallback logic, not SQLite)."""
    from tbprobe.formats import _vis_sql

    db = tmp_path / "cmp.vis.db"
    shutil.copy(ref_db_copies["cmp_md5"], db)
    (tmp_path / "cmp.vis.db-wal").write_bytes(b"")
    real_connect = sqlite3.connect
    tried = []

    def connect(target, *args, **kwargs):
        tried.append(str(target))
        if "immutable=1" not in str(target):
            return real_connect("file:/nonexistent-dir/x.db?mode=ro", uri=True)  # fails like a missing -shm
        return real_connect(target, *args, **kwargs)

    monkeypatch.setattr(_vis_sql.sqlite3, "connect", connect)
    conn = open_db(db)
    assert conn.execute("SELECT count(*) FROM tb_nodes").fetchone()[0] == 92
    assert [t.rsplit("?", 1)[1] for t in tried] == ["mode=ro", "mode=ro&immutable=1"]


def test_quiescent_database_is_read_without_side_files(ref_db_copies, tmp_path):
    """No -wal file: nobody writes the database, it is opened immutable and nothing appears beside it."""
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(ref_db_copies["multi"], folder / "m.vis.db")
    with VisDbReader(folder / "m.vis.db") as r:
        assert r.node_count() == 368
    assert sorted(p.name for p in folder.iterdir()) == ["m.vis.db"]


def test_plain_read_only_open_sees_new_commits(tmp_path):
    """Where the folder is writable the reader is not immutable: it sees what a writer commits later."""
    path = tmp_path / "live.vis.db"
    with LiveVisDb(path) as live:
        reader = VisDbReader(path)
        assert reader.node_count() == 0
        live.add_graph([node_row(0, 0, "NPU", i, 3) for i in range(3)], [], [], step=0, rank=0)
        assert reader.node_count() == 3
        reader.close()


def test_an_exclusively_held_database_is_a_busy_error_not_its_stale_main_file(ref_db_copies, tmp_path, monkeypatch):
    """A writer in locking_mode=EXCLUSIVE keeps its pages in the -wal file and every reader out until it closes.
    The reader waited SQLite's 5 s busy timeout, then read the main file alone: a graph without the writer's
    rows (here: its tables missing). It is a BusyError after READ_WAIT_S, and the file reads once the writer is
    gone."""
    from tbprobe.errors import BusyError
    from tbprobe.formats import _vis_sql

    assert _vis_sql.READ_WAIT_S <= 1.0    # (the plugin's run list opens every file: a wait per locked one)
    monkeypatch.setattr(_vis_sql, "READ_WAIT_S", 0.05)
    db = tmp_path / "held.vis.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA locking_mode=EXCLUSIVE")
    src = sqlite3.connect(ref_db_copies["build"])
    src.backup(writer)
    src.close()
    assert (tmp_path / "held.vis.db-wal").exists()
    seen = []
    real_connect = sqlite3.connect
    monkeypatch.setattr(_vis_sql.sqlite3, "connect", lambda *a, **k: seen.append(k.get("timeout")) or real_connect(
        *a, **k))
    with pytest.raises(BusyError, match=r"held\.vis\.db: locked by another program .*locking_mode=EXCLUSIVE"):
        open_db(db)
    assert seen == [0.05]   # (one attempt: the immutable read of the main file is no answer here)
    writer.close()
    conn = open_db(db)
    assert conn.execute("SELECT count(*) FROM tb_nodes").fetchone()[0] > 0
    conn.close()


def test_read_only_open_never_writes(ref_db_copies):
    conn = open_db(ref_db_copies["build"])
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM tb_nodes")
    conn.close()


# ------------------------------------------------------------------------------- corrupt / foreign files
def test_random_bytes_file(tmp_path):
    bad = tmp_path / "random.vis.db"
    bad.write_bytes(os.urandom(8192))
    with pytest.raises(FormatError) as e:
        VisDbReader(bad)
    assert str(e.value) == f"{bad}: not a readable SQLite database (file is not a database)"


def test_foreign_sqlite_file(tmp_path):
    other = tmp_path / "other.vis.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(FormatError) as e:
        VisDbReader(other)
    assert str(e.value) == f"{other}: not a .vis.db graph database: no tb_nodes, tb_stack, tb_config table"


def test_empty_file_and_missing_file_and_folder(tmp_path):
    empty = tmp_path / "empty.vis.db"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match="not a .vis.db graph database: no tb_nodes"):
        VisDbReader(empty)
    with pytest.raises(FormatError) as e:
        VisDbReader(tmp_path / "gone.vis.db")
    assert str(e.value) == f"{tmp_path / 'gone.vis.db'}: no such database file"
    with pytest.raises(FormatError, match="expected a .vis.db file, found a folder"):
        VisDbReader(tmp_path)


def test_a_fifo_is_not_a_regular_file_not_a_folder(tmp_path):
    """A FIFO named x.vis.db was reported as "found a folder" (and is never opened: that would block)."""
    fifo = tmp_path / "x.vis.db"
    os.mkfifo(fifo)
    with pytest.raises(FormatError) as e:
        VisDbReader(fifo)
    assert str(e.value) == (f"{fifo}: expected a .vis.db file, found something that is not a regular file (a FIFO, "
                            "a device or a socket)")


def test_truncated_database(ref_db_copies, tmp_path):
    src = ref_db_copies["multi"].read_bytes()
    cut = tmp_path / "cut.vis.db"
    cut.write_bytes(src[: len(src) // 3])
    with pytest.raises(FormatError) as e:
        with VisDbReader(cut) as r:
            for step, rank, side in r.graphs():
                list(r.nodes(step, rank, side))
    assert str(e.value).startswith(f"{cut}: ")
    assert "malformed" in str(e.value) or "not a readable" in str(e.value)


# --------------------------------------------------------------------------------------------- live db
def test_live_db_steps_are_atomic_for_readers(tmp_path):
    path = tmp_path / "live" / "build_rank0.vis.db"
    live = LiveVisDb(path, task="summary")
    assert sorted(p.name for p in path.parent.iterdir() if ".tmp-" in p.name) == []
    n, steps = 400, 12
    errors = []

    def write():
        try:
            for step in range(steps):
                rows = [node_row(step, 0, "NPU", i, n) for i in range(n)]
                stacks = [(f"NPU_{step}_0_0", json.dumps(["File t.py, line 1, in f, \n x"]))]
                live.add_graph(rows, stacks, [], step=step, rank=0)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    t = threading.Thread(target=write)
    t.start()
    while True:
        done = not t.is_alive()
        reader.execute("BEGIN")
        counts = dict(reader.execute("SELECT step, count(*) FROM tb_nodes GROUP BY step").fetchall())
        listed = json.loads(reader.execute("SELECT step_list FROM tb_config").fetchone()[0])
        reader.execute("COMMIT")
        assert all(c == n for c in counts.values()), counts  # never half a step
        assert sorted(counts) == listed  # step_list agrees with the rows in the same snapshot
        if done:
            break
    t.join()
    assert not errors
    assert len(counts) == steps
    live.close()
    with VisDbReader(path) as r:
        assert r.is_tbprobe and r.meta()["live"] == "0"   # (closed: the writer is done)
        assert r.config()["step_list"] == list(range(steps)) and r.config()["rank_list"] == [0]
        assert {f"index{i}" for i in range(1, 8)} <= {row[1] for row in schema_of(r.conn)}
        stored = {row[3] for row in schema_of(r.conn, REF_TABLES)}
        assert stored == set(TABLE_STATEMENTS + INDEX_STATEMENTS)  # same text as the reference's schema


def test_live_db_replaces_a_step_and_reopens(tmp_path):
    path = tmp_path / "live.vis.db"
    with LiveVisDb(path) as live:
        live.add_graph([node_row(0, 1, "NPU", i, 5) for i in range(5)], [], [], step=0, rank=1)
        live.add_graph([node_row(0, 1, "NPU", i, 3) for i in range(3)], [], [], step=0, rank=1, micro_steps=2)
    with LiveVisDb(path) as live:  # a resumed run appends
        live.add_graph([node_row(1, 1, "NPU", i, 4) for i in range(4)], [], [], step=1, rank=1)
    with VisDbReader(path) as r:
        assert r.node_count(0, 1, "NPU") == 3 and r.node_count(1, 1, "NPU") == 4
        cfg = r.config()
        assert cfg["step_list"] == [0, 1] and cfg["rank_list"] == [1] and cfg["micro_steps"] == 2


def test_live_db_failed_step_changes_nothing(tmp_path):
    path = tmp_path / "live.vis.db"
    with LiveVisDb(path) as live:
        live.add_graph([node_row(0, 0, "NPU", i, 3) for i in range(3)], [], [], step=0, rank=0)
        row = node_row(1, 0, "NPU", 0, 3)
        with pytest.raises(sqlite3.IntegrityError):
            live.add_graph([row, row], [], [], step=1, rank=0)
    with VisDbReader(path) as r:
        assert r.config()["step_list"] == [0] and r.node_count(1, 0, "NPU") == 0


def test_live_db_refuses_a_foreign_file(tmp_path):
    other = tmp_path / "x.vis.db"
    sqlite3.connect(other).execute("CREATE TABLE t (a)").connection.commit()
    with pytest.raises(FormatError, match="not a tbprobe live graph database"):
        LiveVisDb(other)


def test_a_resumed_run_replaces_the_earlier_runs_graphs_from_its_first_step(tmp_path):
    """A run resumed at a lower step (set_init_step) into the same dump_path: the kept steps were the highest
    numbers, so each of its graphs was dropped in the transaction that added it; and the killed run's graphs of
    steps the new run rewrote but its live graph skipped stayed, beside a dump.json written anew."""
    path = tmp_path / "live.vis.db"

    def add(live, step, n=3):
        live.add_graph([node_row(step, 0, "NPU", i, n) for i in range(n)], [], [], step=step, rank=0, keep_steps=4)

    with LiveVisDb(path) as live:
        for step in range(50, 60):
            add(live, step)
        add(live, 5)   # (in one run: the last written, kept, not the lowest number dropped)
    with VisDbReader(path) as r:
        assert r.config()["step_list"] == [5, 57, 58, 59]
    with LiveVisDb(path) as live:     # the run resumed at step 20
        for step in (20, 21, 23):
            add(live, step)
    with VisDbReader(path) as r:
        assert r.config()["step_list"] == [5, 20, 21, 23]   # (step 5, before the resumed run's first, stays)


def test_live_db_keeps_the_last_steps_it_is_asked_to(tmp_path):
    """One graph per interval, never dropped, grew a long run's live database without bound (7.5 MB/s on a
    10k-node model): with keep_steps the oldest graphs go in the same transaction, their pages reused, and
    step_list names the steps left."""
    path = tmp_path / "live.vis.db"
    with LiveVisDb(path) as live:
        for step in range(20):
            stacks = [(f"NPU_{step}_0_{i}", "[]") for i in range(3)]
            live.add_graph([node_row(step, 0, "NPU", i, 50) for i in range(50)], stacks, [], step=step, rank=0,
                           keep_steps=3)
            if step == 4:
                size = os.path.getsize(path) + os.path.getsize(f"{path}-wal")
    with VisDbReader(path) as r:
        assert r.config()["step_list"] == [17, 18, 19]
        assert sorted({g[0] for g in r.graphs()}) == [17, 18, 19]
        assert r.conn.execute("SELECT count(*) FROM tb_stack").fetchone()[0] == 9
    assert os.path.getsize(path) <= 2 * size    # (what the later steps added fits in the pages the old ones left)
