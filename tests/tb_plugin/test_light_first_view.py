"""The first view of a graph whose index is not built yet: root and children straight from SQLite's indexes,
marked partial (no subtree roll-ups), equal to the index's answers otherwise; complete once the index is ready."""
import sqlite3

import pytest

from tbprobe.tb_plugin import light_graph
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tests.tb_plugin.compact_form import expand_compact
from tests.tb_plugin.conftest import db_file, fixture_dbs

ROLLUPS = ("subtree_precision", "subtree_overflow")


def without_rollups(items):
    return [{k: v for k, v in s.items() if k not in ROLLUPS + ("partial",)} for s in items]


@pytest.fixture
def index_never_ready(monkeypatch):
    """As if the graph's index were still being built (a big file's first open)."""
    monkeypatch.setattr(DbGraphFile, "index_if_ready", lambda self, step, rank, side, wait_s: None)


@pytest.mark.parametrize("case,file", [c for c in fixture_dbs() if c[0] in ("cmp_stat", "build", "cmp_dist")])
def test_light_answers_equal_the_index_answers_but_for_rollups(api, logdir, case, file, monkeypatch):
    run, file = db_file(logdir, case)
    _, meta = api.get("/api/meta", run=run, file=file)
    q = dict(run=run, file=file, step=meta["steps"][0], rank=meta["ranks"][0])
    full = {}
    for side in meta["sides"]:
        _, root = api.get("/api/root", side=side, **q)
        todo = [root["name"]]
        while todo:
            node = todo.pop()
            _, block = api.get("/api/children", side=side, node=node, **q)
            full[side, node] = block
            todo += [c["name"] for c in block["children"] if c["n_children"]]
        full[side, None] = root
    monkeypatch.setattr(DbGraphFile, "index_if_ready", lambda self, step, rank, side, wait_s: None)
    for (side, node), block in full.items():
        if node is None:
            status, light_root = api.get("/api/root", side=side, **q)
            assert status == 200 and light_root["partial"] is True
            assert light_root["subtree_precision"] is None and light_root["subtree_overflow"] is None
            assert without_rollups([light_root]) == without_rollups([block])
            continue
        _, light = api.get("/api/children", side=side, node=node, **q)
        assert light["partial"] is True and light["total"] == block["total"]
        assert all(c["subtree_precision"] is None and c["subtree_overflow"] is None for c in light["children"])
        assert without_rollups(light["children"]) == without_rollups(block["children"])
        _, compact = api.get("/api/children", side=side, node=node, compact=1, **q)
        assert compact["partial"] is True
        assert without_rollups(expand_compact(compact)) == without_rollups(block["children"])


def test_light_view_reads_no_data_columns_and_uses_indexes(logdir):
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(f"file:{logdir / run / file}?mode=ro", uri=True)
    try:
        read_columns = set()

        def authorizer(action, table, column, *_):
            if action == sqlite3.SQLITE_READ and table == "tb_nodes":
                read_columns.add(column)
            return sqlite3.SQLITE_OK

        conn.set_authorizer(authorizer)
        assert light_graph.eligible(conn, 0, 0, "NPU")
        root = light_graph.root_summary(conn, 0, 0, "NPU")
        kids = light_graph.child_summaries(conn, 0, 0, "NPU", root["name"])
        conn.set_authorizer(None)
        assert kids and root["n_children"] == len(kids)
        assert not read_columns & {"input_data", "output_data", "stack_id", "parallel_merge_info"}
        plans = [r[-1] for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT node_name FROM tb_nodes n WHERE n.step = 0 AND n.rank = 0"
            " AND n.data_source = 'NPU' AND n.up_node = ? ORDER BY n.node_order", (root["name"],))]
        assert any("USING INDEX" in p or "USING COVERING INDEX" in p for p in plans), plans
    finally:
        conn.close()


def test_light_view_unknown_node_is_404_and_edits_force_the_index(api, logdir, index_never_ready):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU")
    status, body = api.get("/api/children", node="no such node", **q)
    assert status == 404 and "no such node" in body["error"]
    _, root = api.get("/api/root", **q)
    assert root["partial"] is True
    # A side-file edit needs the index (it changes summaries): those graphs are never answered lightly.
    status, _ = api.post("/api/unmatch", dict(run=run, file=file, step=0, rank=0,
                                              debug="Module.layers.0.Block.forward.0", descendants=False))
    assert status == 200
    _, root = api.get("/api/root", **q)
    assert "partial" not in root
    _, kids = api.get("/api/children", node=root["name"], **q)
    assert "partial" not in kids


def test_index_if_ready_builds_in_the_background_and_waits_once(logdir):
    run, file = db_file(logdir, "cmp_stat")
    gf = DbGraphFile(str(logdir / run / file))
    idx = gf.index_if_ready(0, 0, "NPU", 30.0)  # a small graph: built within the wait
    assert idx is not None and idx is gf.index(0, 0, "NPU")
    assert gf.index_if_ready(0, 0, "NPU", 0.0) is idx


def test_a_big_file_builds_its_index_after_the_first_view(logdir, monkeypatch):
    from tbprobe.tb_plugin import graph_store
    monkeypatch.setattr(graph_store, "_BIG_FILE", 0)  # every file counts as big here
    monkeypatch.setattr(graph_store, "_QUIET_S", 0.05)
    run, file = db_file(logdir, "cmp_stat")
    gf = DbGraphFile(str(logdir / run / file))
    assert gf.index_if_ready(0, 0, "NPU", 30.0) is None  # deferred: not waited for
    root = gf.light_root(0, 0, "NPU")
    assert gf.light_children(0, 0, "NPU", root["name"], -1)
    event = gf._build_done[(0, 0, "NPU")][0]
    assert event.wait(60), "the deferred build never ran"
    assert gf.index_if_ready(0, 0, "NPU", 0.0) is gf.index(0, 0, "NPU")


def test_a_graph_whose_index_cannot_be_built_is_a_400_naming_the_file_not_partial_for_ever(tmp_path):
    """64 KiB of random bytes in the middle of the file: SQLite's indexes still give the light first view, the
    index's full read fails. The root was `"partial": true` on every call (the page polled it ~120 times, then
    stopped without a word)."""
    import os
    import random

    from tests.tb_plugin.conftest import make_api
    from tests.tb_plugin.synth_db import make_compare_db

    os.makedirs(tmp_path / "r")
    path = make_compare_db(str(tmp_path / "r" / "c.vis.db"), n_nodes=3000, big_children=100, seed=1)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(random.Random(0).randbytes(65536))
    api = make_api(tmp_path)
    q = dict(run="r", file="c.vis.db", step=0, rank=0, side="NPU")
    assert api.get("/api/meta", run="r", file="c.vis.db")[0] == 200
    for _ in range(3):
        status, body = api.get("/api/root", **q)
        assert status == 400, body
        assert body["error"].startswith("c.vis.db: ") and "malformed" in body["error"], body
        assert api.get("/api/children", node="DefaultModel", **q)[0] == 400


def _locked_error(tmp_path) -> sqlite3.OperationalError:
    """A real "database is locked" (SQLITE_BUSY): what a reader meets while an apply writes with a rollback
    journal."""
    path = str(tmp_path / "locked.db")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN EXCLUSIVE")
    reader = sqlite3.connect(path, timeout=0)
    try:
        reader.execute("SELECT * FROM t").fetchall()
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        reader.close()
        writer.close()
    raise AssertionError("the exclusive lock did not hold the reader off")


@pytest.mark.parametrize("kind", ["locked", "memory", "oserror", "bug"])
@pytest.mark.parametrize("background", [False, True])
def test_a_passing_failure_of_an_index_build_is_not_kept(tmp_path, monkeypatch, kind, background):
    """Only what the file itself causes is kept until it changes; a locked database, memory, an I/O error (503)
    and a bug (raised as it is: a 500 at the route) fail this build only, and the next request builds again."""
    from tbprobe.tb_plugin import graph_store
    from tbprobe.tb_plugin.api_error import ApiError
    from tests.tb_plugin.synth_db import make_compare_db

    path = make_compare_db(str(tmp_path / "c.vis.db"), n_nodes=300, big_children=40, seed=2)
    error = {"locked": _locked_error(tmp_path), "memory": MemoryError(), "oserror": OSError(5, "Input/output error"),
             "bug": TypeError("a bug")}[kind]
    calls = []

    def fail_once(limit_s=1.0):  # (inside the scan's connection: the path a real read error takes)
        calls.append(1)
        if len(calls) == 1:
            raise error

    monkeypatch.setattr(graph_store._FOREGROUND, "wait_idle", fail_once)
    gf = DbGraphFile(path)
    build = (lambda: gf.index_if_ready(0, 0, "NPU", 60.0)) if background else (lambda: gf.index(0, 0, "NPU"))
    if kind == "bug":
        with pytest.raises(TypeError):
            build()
    else:
        with pytest.raises(ApiError) as caught:
            build()
        assert caught.value.status == 503 and caught.value.message.startswith("c.vis.db: "), caught.value.message
    idx = build()
    assert idx is not None and idx is gf.index(0, 0, "NPU")


def test_a_bug_in_an_index_build_is_a_500_without_its_text_then_built_again(tmp_path, monkeypatch):
    from tbprobe.tb_plugin import graph_store
    from tests.tb_plugin.conftest import make_api
    from tests.tb_plugin.synth_db import make_compare_db

    (tmp_path / "r").mkdir()
    make_compare_db(str(tmp_path / "r" / "c.vis.db"), n_nodes=300, big_children=40, seed=2)
    real = graph_store.GraphIndex
    calls = []

    class Buggy(real):
        def __init__(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise KeyError("secret internals")
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(graph_store, "GraphIndex", Buggy)
    # (no start-up warm-up: its thread built this graph first and met the injected error, leaving this request a
    # clean build: the test failed when run alone)
    monkeypatch.setenv("TBPROBE_PLUGIN_WARMUP", "0")
    api = make_api(tmp_path)
    q = dict(run="r", file="c.vis.db", step=0, rank=0)
    status, body = api.get("/api/findings", **q)
    assert status == 500, body
    assert "secret" not in body["error"] and "KeyError" not in body["error"], body
    assert api.get("/api/findings", **q)[0] == 200


def test_a_wrong_schema_is_a_400_kept_until_the_file_changes(tmp_path, monkeypatch):
    from tbprobe.tb_plugin.api_error import ApiError
    from tests.tb_plugin.synth_db import make_compare_db

    path = make_compare_db(str(tmp_path / "c.vis.db"), n_nodes=300, big_children=40, seed=2)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE tb_nodes RENAME COLUMN micro_step_id TO micro")
    conn.close()
    gf = DbGraphFile(path)
    scans = []
    real = DbGraphFile._scan_index
    monkeypatch.setattr(DbGraphFile, "_scan_index", lambda self, *a: scans.append(a) or real(self, *a))
    for _ in range(2):
        with pytest.raises(ApiError) as caught:
            gf.index(0, 0, "NPU")
        assert caught.value.status == 400 and "micro_step_id" in caught.value.message, caught.value.message
    assert len(scans) == 1
