"""Graph files of the wrong shapes are a 400 naming the file and the problem on every route, never a 500.

Found by feeding hostile files to every GET route: a ``.vis.db`` whose node_name is NULL or a blob (the index's
search join raised TypeError: a 500 on every graph route), a legacy ``.vis`` nested 100,000 deep (json's
RecursionError was a 500 on ``/api/runs`` itself: one file broke the list of every run), and a ``.vis`` whose
nodes are not objects or whose subnodes are not names (AttributeError / TypeError, 500s); and a database truncated
in place while the index scan read it through a memory map (SIGBUS: TensorBoard died).
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from tbprobe.tb_plugin import graph_store, light_graph
from tbprobe.tb_plugin.api_error import ApiError
from tests.tb_plugin.conftest import db_file
from tests.tb_plugin.synth_db import make_compare_db

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROUTES = ("/api/root", "/api/children", "/api/path_children", "/api/node", "/api/search", "/api/filter",
          "/api/findings", "/api/overflow", "/api/compare_table")


def _every_route(api, run, file):
    out = []
    for route in ROUTES:
        status, body = api.get(route, run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel", q="a")
        out.append((route, status, (body or {}).get("error") if isinstance(body, dict) else body))
    return out


def _loosen(conn):
    """tb_nodes without its NOT NULL constraints (as a hand-made or foreign file may have it)."""
    conn.executescript("CREATE TABLE t2 AS SELECT * FROM tb_nodes; DROP TABLE tb_nodes;"
                       " ALTER TABLE t2 RENAME TO tb_nodes;"
                       " CREATE INDEX index1 ON tb_nodes (step, rank, data_source, up_node, node_order);")


@pytest.mark.parametrize("value,shown", [("NULL", "NULL"), ("CAST(node_name AS BLOB)", "a 24-byte blob")])
def test_a_node_name_that_is_not_text_is_a_400_on_every_graph_route(api, logdir, value, shown):
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    _loosen(conn)
    conn.execute(f"UPDATE tb_nodes SET node_name = {value} WHERE node_name = 'Tensor.__mul__.1.forward'")
    conn.commit()
    for route, status, error in _every_route(api, run, file):
        assert status == 400 and error.startswith(f"{file}: column node_name of the node at position "), route
        assert error.endswith(f"holds {shown}, not a name"), (route, error)
    # the first view, answered from SQLite before the index is ready, refuses it too (a blob was a 500 in JSON)
    parent = conn.execute("SELECT up_node FROM tb_nodes WHERE typeof(node_name) != 'text' AND data_source = 'NPU'"
                          ).fetchone()[0]
    with pytest.raises(ApiError) as err:
        light_graph.child_summaries(conn, 0, 0, "NPU", parent, -1, file)
    conn.close()
    assert err.value.status == 400 and "column node_name of the node at node_order" in err.value.message


def test_an_up_node_that_is_a_blob_is_a_400(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    conn.execute("UPDATE tb_nodes SET up_node = x'00ff' WHERE node_name = 'Tensor.__mul__.1.forward'")
    conn.commit()
    conn.close()
    for route, status, error in _every_route(api, run, file):
        assert (status, error) == (400, f"{file}: column up_node of node 'Tensor.__mul__.1.forward' holds a "
                                        "2-byte blob, not a name"), route


def test_a_vis_file_nested_too_deeply_is_listed_with_its_error_and_a_400(api, logdir):
    (logdir / "old").mkdir()
    (logdir / "old" / "deep.vis").write_text("[" * 100_000, encoding="utf-8")
    status, body = api.get("/api/runs")
    assert status == 200, body
    listed = {f["file"]: f for r in body["runs"] for f in r["files"]}
    assert listed["deep.vis"]["error"] == "deep.vis: not a .vis graph (nested too deeply)"
    assert len(listed) > 1     # the other files are still listed
    status, body = api.get("/api/meta", run="old", file="deep.vis")
    assert (status, body["error"]) == (400, "deep.vis: not a .vis graph (nested too deeply)")


@pytest.mark.parametrize("graph,want", [
    ({"root": "A", "node": [1, 2]}, "the NPU graph's node is not an object of nodes"),
    ({"root": 5, "node": {}}, "the NPU graph's root is not a node name"),
    ({"root": "A", "node": {"A": 3}}, "NPU node 'A' is not an object"),
    ({"root": "A", "node": {"A": {"subnodes": "B"}}}, "subnodes of NPU node 'A' is not a list"),
    ({"root": "A", "node": {"A": {"subnodes": [["B"], 3]}}}, "subnodes of NPU node 'A' holds a value that is not a name"),
    ({"root": "A", "node": {"A": {"upnode": 7}}}, "upnode of NPU node 'A' is not a name"),
    ({"root": "A", "node": {"A": {"data": [0.5]}}}, "data of NPU node 'A' is not an object"),
    ({"root": "A", "node": {"A": {"input_data": "x"}}}, "input_data of NPU node 'A' is not an object"),
])
def test_a_vis_graph_of_the_wrong_shape_is_a_400_on_every_route(api, logdir, graph, want):
    (logdir / "old").mkdir()
    (logdir / "old" / "bad.vis").write_text(json.dumps({"NPU": graph}), encoding="utf-8")
    status, body = api.get("/api/meta", run="old", file="bad.vis")
    assert (status, body["error"]) == (400, f"bad.vis: {want}")
    for route, status, error in _every_route(api, "old", "bad.vis"):
        assert (status, error) == (400, f"bad.vis: {want}"), route


_TRUNCATE_MID_SCAN = """
import sys
from tbprobe.tb_plugin import graph_store
from tbprobe.tb_plugin.api_error import ApiError
path = sys.argv[1]
gf = graph_store.DbGraphFile(path)
wait_idle = graph_store._FOREGROUND.wait_idle
done = []
def truncate_once():  # between two chunks of the index scan, the cursor open: another process truncates the file
    if not done:
        done.append(1)
        with open(path, "r+b") as f:
            f.truncate(8192)
    wait_idle()
graph_store._FOREGROUND.wait_idle = truncate_once
try:
    gf.index(0, 0, "NPU")
    print("built")
except ApiError as exc:
    print(exc.status, exc.message)
"""


def test_a_database_truncated_in_place_during_the_index_scan_is_a_400_not_a_sigbus(tmp_path):
    """The scan memory-mapped the file (PRAGMA mmap_size): truncated in place under it, the next page read was a
    SIGBUS that killed TensorBoard (seen with a real server, 6 threads reading while a writer truncated)."""
    path = str(tmp_path / "g.vis.db")
    make_compare_db(path, n_nodes=3 * graph_store._SCAN_CHUNK, big_children=10, with_data=False)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", _TRUNCATE_MID_SCAN, path], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])   # -7: SIGBUS
    assert proc.stdout.strip() == "400 g.vis.db: database read failed (database disk image is malformed)", proc.stdout


def test_a_second_listing_of_more_than_10000_files_opens_none_of_them(tmp_path, monkeypatch):
    """The listing's graph-type cache was cleared whenever it passed 10,000 entries: a log directory of 10,050
    runs opened every database on every /api/runs (2.7 s a call, measured with a real server). GraphData.runs()
    is what the route answers (the app's start-up warm-up would open files of its own meanwhile)."""
    from tbprobe.tb_plugin import graph_data
    source = os.path.join(os.path.dirname(__file__), "..", "fixtures", "msprobe-26.2.0", "outputs", "build")
    db = os.path.join(source, os.listdir(source)[0])
    for i in range(10_050):
        os.makedirs(tmp_path / f"run{i:05d}")
        os.link(db, tmp_path / f"run{i:05d}" / "build.vis.db")
    opened = []
    real_open = graph_data.open_readonly
    monkeypatch.setattr(graph_data, "open_readonly", lambda path: opened.append(path) or real_open(path))
    data = graph_data.GraphData(str(tmp_path))
    runs = data.runs()["runs"]
    assert len(runs) == 10_050 and all(f["graph_type"] == "build" for r in runs for f in r["files"])
    assert len(opened) == 10_050
    opened.clear()
    assert len(data.runs()["runs"]) == 10_050 and opened == []
    # a file that changed is opened again, and the entry of its old version dropped
    os.unlink(tmp_path / "run00007" / "build.vis.db")
    (tmp_path / "run00007" / "build.vis.db").write_bytes(b"not a database")
    listed = {r["run"]: r["files"][0] for r in data.runs()["runs"]}
    assert len(opened) == 1 and opened[0].endswith("run00007/build.vis.db")
    assert listed["run00007"]["graph_type"] is None and "not a" in listed["run00007"]["error"]
    assert len(data._types) == 10_050


def test_apply_refuses_a_database_that_holds_triggers_and_writes_nothing(api, logdir):
    """A planted trigger ran with the apply's UPDATE: an endless INSERT filled the disk (a bounded one wrote
    3.3 GB in 41 s). Here it would add 10 rows; the apply must not run it, nor make a backup."""
    run, file = db_file(logdir, "cmp_stat")
    path = logdir / run / file
    conn = sqlite3.connect(str(path))
    conn.executescript("CREATE TABLE junk(x); CREATE TRIGGER tb_nodes AFTER UPDATE ON tb_config BEGIN"
                       " INSERT INTO junk WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 10)"
                       " SELECT x FROM c; END;")
    conn.close()
    colors = {"#FFFFFF": {"value": [0, 1], "description": "all", "accuracy_level": "all"}}
    assert api.post("/api/legend", {"run": run, "file": file, "node_colors": colors})[0] == 200
    before = sorted(os.listdir(logdir / run))
    status, body = api.post("/api/apply", {"run": run, "file": file})
    assert (status, body["error"]) == (400, f"{file}: apply refused: the database holds SQL triggers ('tb_nodes'), "
                                            "which a write would run; neither msprobe nor tbprobe writes any")
    assert sorted(os.listdir(logdir / run)) == before      # no backup, the legend's side file kept
    conn = sqlite3.connect(str(path))
    assert conn.execute("SELECT COUNT(*) FROM junk").fetchone()[0] == 0
    assert "#FFFFFF" not in conn.execute("SELECT node_colors FROM tb_config").fetchone()[0]
    conn.close()


def test_views_named_like_the_reference_tables_are_never_read(api, logdir):
    """A VIEW named tb_config (the listing's graph type) or tb_stack (a node's stack) was queried: one WITH
    RECURSIVE and endless hung /api/runs, or /api/node, for good. Here the views answer at once with planted
    values, which must not show."""
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    conn.executescript("ALTER TABLE tb_stack RENAME TO real_stack;"
                       " CREATE VIEW tb_stack AS SELECT id, '[\"planted\"]' AS stack_info FROM real_stack;")
    node = conn.execute("SELECT node_name FROM tb_nodes WHERE stack_id IS NOT NULL AND stack_id != ''"
                        " AND data_source = 'NPU' LIMIT 1").fetchone()[0]
    conn.close()
    status, body = api.get("/api/node", run=run, file=file, step=0, rank=0, side="NPU", node=node)
    assert status == 200 and body["stack"] == [], body.get("stack")

    (logdir / "v").mkdir()
    shutil.copy(logdir / run / file, logdir / "v" / "g.vis.db")
    conn = sqlite3.connect(str(logdir / "v" / "g.vis.db"))
    conn.executescript("ALTER TABLE tb_config RENAME TO real_config;"
                       " CREATE VIEW tb_config AS SELECT 'planted' AS graph_type;")
    conn.close()
    status, body = api.get("/api/runs")
    listed = {r["run"]: r["files"][0] for r in body["runs"]}
    assert status == 200 and listed["v"]["graph_type"] is None
    assert listed["v"]["error"] == "g.vis.db: not a graph database (no tb_nodes/tb_config tables)"


def test_a_parent_cycle_hangs_under_the_root_instead_of_vanishing(api, logdir):
    """Each module under the root given its first child as parent (A -> B -> A): nothing led to them from the root
    and 47 of the 48 nodes vanished from every view, without a word."""
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    conn.execute("UPDATE tb_nodes SET up_node = (SELECT c.node_name FROM tb_nodes c WHERE c.up_node = tb_nodes.node_name"
                 " AND c.data_source = tb_nodes.data_source ORDER BY c.node_order LIMIT 1)"
                 " WHERE up_node = 'DefaultModel' AND data_source = 'NPU'"
                 " AND EXISTS (SELECT 1 FROM tb_nodes c WHERE c.up_node = tb_nodes.node_name)")
    conn.commit()
    stored = conn.execute("SELECT COUNT(*) FROM tb_nodes WHERE data_source = 'NPU'").fetchone()[0]
    conn.close()
    status, body = api.get("/api/depth_children", run=run, file=file, step=0, rank=0, side="NPU", depth=64,
                           max_nodes=100000)
    assert status == 200 and body["complete"] and not body["capped"]
    assert 1 + sum(level["count"] for level in body["levels"]) == stored


@pytest.mark.parametrize("column,value,shown", [("step_list", "[0, 99999999999999999999]", "99999999999999999999"),
                                                ("rank_list", "[-9223372036854775808]", "-9223372036854775808")])
def test_a_tb_config_step_past_what_a_request_can_name_is_a_400_without_a_traceback(api, logdir, capfd, column,
                                                                                   value, shown):
    """A step_list of 99999999999999999999 was listed by /api/meta (200): the page asks for a step the routes
    refuse ("parameter step must be between ..."), and the background index of that step printed an OverflowError
    traceback on TensorBoard's console (SQLite binds 64-bit integers only)."""
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    conn.execute(f"UPDATE tb_config SET {column} = ?", (value,))
    conn.commit()
    conn.close()
    want = (f"{file}: tb_config {column} holds {shown}, past the range of a step, rank or count "
            "(-2147483648 to 2147483647)")
    status, body = api.get("/api/meta", run=run, file=file)
    assert (status, body["error"]) == (400, want)
    for route, status, error in _every_route(api, run, file):
        assert (status, error) == (400, want), route
    status, body = api.get("/api/runs")
    assert status == 200
    assert "Traceback" not in capfd.readouterr().err


def test_a_database_held_exclusively_is_listed_with_its_error_then_a_503_until_it_is_let_go(api, logdir,
                                                                                             monkeypatch):
    """A program writing a .vis.db in SQLite's locking_mode=EXCLUSIVE (its pages in the -wal file until it closes):
    the run list waited 5 s on it at each listing, and the routes read the main file alone (here: no tables, a
    400 remembered until the file changed). It is listed with its error, each route is a 503 (try again), and
    once the writer closes the file the same requests are answered."""
    from tbprobe.formats import _vis_sql

    monkeypatch.setattr(_vis_sql, "READ_WAIT_S", 0.05)
    run, file = db_file(logdir, "build")
    (logdir / "held").mkdir()
    writer = sqlite3.connect(logdir / "held" / "h.vis.db", isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA locking_mode=EXCLUSIVE")
    src = sqlite3.connect(logdir / run / file)
    src.backup(writer)
    src.close()
    try:
        status, body = api.get("/api/runs")
        assert status == 200, body
        listed = {f["file"]: f for r in body["runs"] for f in r["files"]}
        assert listed["h.vis.db"]["error"].startswith("h.vis.db: locked by another program"), listed["h.vis.db"]
        assert "error" not in listed[file]     # the other files are listed as they are
        status, body = api.get("/api/meta", run="held", file="h.vis.db")
        assert status == 503 and body["error"].endswith("; try again"), body
        assert "/" not in body["error"].split(":")[0]    # (the file's name, not the server's folders)
    finally:
        writer.close()
    status, body = api.get("/api/meta", run="held", file="h.vis.db")
    assert status == 200, body
    assert [s for s in _every_route(api, "held", "h.vis.db") if s[1] != 200] == []
    status, body = api.get("/api/runs")
    listed = {f["file"]: f for r in body["runs"] for f in r["files"]}
    assert "error" not in listed["h.vis.db"], listed["h.vis.db"]
