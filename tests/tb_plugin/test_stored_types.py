"""Wrongly typed values in a graph file's columns are a 400 naming the file, the column and the node, never a 500.

A hand-made or damaged ``.vis.db`` held `node_type = 'abc'` (or '1.5', 99999999999999999999, a blob) or
`micro_step_id = 'zz'`: /api/node was a 500 (int() in node_detail.py) while the index read them as 0 (SQL CAST);
`tbprobe_node_ext.exec_order = 'a'` was a 500 on every graph route (the index build's int64 array). tb_config's
lists took "²" (str.isdigit) and then failed in int(), a 500 on every route.
"""
import json
import sqlite3

import pytest

from tbprobe.tb_plugin import light_graph
from tbprobe.tb_plugin.api_error import ApiError
from tests.tb_plugin.conftest import db_file

NODE = "Tensor.__mul__.1.forward"
ROUTES = ("/api/root", "/api/children", "/api/node", "/api/search", "/api/findings", "/api/overflow")


def _query(api, run, file, route):
    return api.get(route, run=run, file=file, step=0, rank=0, side="NPU", node=NODE if route == "/api/node"
                   else "DefaultModel", q="mul")


def _update(path, sql, args=()):
    conn = sqlite3.connect(str(path))
    conn.execute(sql, args)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("column,value,shown", [
    ("node_type", "'abc'", "'abc'"), ("node_type", "'1.5'", "'1.5'"), ("node_type", "99999999999999999999", "'1.0e+20'"),
    ("node_type", "x'00'", "a 1-byte blob"), ("node_type", "' 1'", "' 1'"), ("node_type", "'\u0661'", "'\u0661'"),
    ("micro_step_id", "'zz'", "'zz'"), ("micro_step_id", "1.5", "1.5"), ("micro_step_id", "1e300", "1e+300"),
])
def test_a_wrongly_typed_node_column_is_a_400_on_every_graph_route(api, logdir, column, value, shown):
    run, file = db_file(logdir, "cmp_stat")
    _update(logdir / run / file, f"UPDATE tb_nodes SET {column} = {value} WHERE node_name = ? AND data_source = 'NPU'",
            (NODE,))
    want = f"{file}: column {column} of node '{NODE}' holds {shown}, not an integer"
    for route in ROUTES:
        status, body = _query(api, run, file, route)
        assert (status, body.get("error")) == (400, want), route
    # the first view of a big file, answered from SQLite before the index is ready, says the same
    conn = sqlite3.connect(str(logdir / run / file))
    try:
        parent = conn.execute("SELECT up_node FROM tb_nodes WHERE node_name = ? AND data_source = 'NPU'",
                              (NODE,)).fetchone()[0]
        with pytest.raises(ApiError) as err:
            light_graph.child_summaries(conn, 0, 0, "NPU", parent, -1, file)
        assert (err.value.status, err.value.message) == (400, want)
    finally:
        conn.close()


def test_an_integer_out_of_its_range_is_a_400_too(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    _update(logdir / run / file, "UPDATE tb_nodes SET node_type = '70000' WHERE node_name = ?", (NODE,))
    status, body = _query(api, run, file, "/api/node")
    assert (status, body["error"]) == (400, f"{file}: column node_type of node '{NODE}' holds 70000, not an "
                                            "integer from -32768 to 32767")


def test_integers_stored_as_text_or_negative_still_read(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    _update(logdir / run / file, "UPDATE tb_nodes SET node_type = '-5', micro_step_id = '0' WHERE node_name = ?",
            (NODE,))
    status, node = _query(api, run, file, "/api/node")
    assert status == 200 and node["type"] == -5 and node["micro_step"] == 0


def test_a_wrongly_typed_exec_order_is_a_400_not_a_500_on_every_graph_route(api, logdir):
    from tbprobe.formats.vis_schema import TBPROBE_TABLE_STATEMENTS

    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    for statement in TBPROBE_TABLE_STATEMENTS:
        conn.execute(statement)
    conn.execute("INSERT INTO tbprobe_node_ext (id, exec_order) SELECT id, node_order FROM tb_nodes")
    conn.execute("UPDATE tbprobe_node_ext SET exec_order = 'a' WHERE id = (SELECT id FROM tb_nodes WHERE "
                 "node_name = ? AND data_source = 'NPU')", (NODE,))
    conn.commit()
    conn.close()
    want = f"{file}: column exec_order of node '{NODE}' holds 'a', not an integer"
    for route in ROUTES:
        status, body = _query(api, run, file, route)
        assert (status, body.get("error")) == (400, want), route


@pytest.mark.parametrize("column,value", [("step_list", '["\u00b2"]'), ("rank_list", '[" 1"]'),
                                          ("step_list", '["\u0660"]')])
def test_tb_config_lists_take_ascii_digits_only(api, logdir, column, value):
    """"²" passed str.isdigit() and failed in int() (a 500 on every route); " 1" and "٠" were read as 1 and 0."""
    run, file = db_file(logdir, "cmp_stat")
    _update(logdir / run / file, f"UPDATE tb_config SET {column} = ?", (value,))
    status, body = api.get("/api/meta", run=run, file=file)
    assert status == 400 and body["error"] == (f"{file}: tb_config {column} holds '{json.loads(value)[0]}', not a "
                                               "step, rank or count"), body


def test_a_schema_version_of_other_digits_is_no_version_not_a_500(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    conn.execute("CREATE TABLE tbprobe_meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO tbprobe_meta VALUES ('schema_version', '\u00b2')")
    conn.commit()
    conn.close()
    status, meta = api.get("/api/meta", run=run, file=file)
    assert status == 200 and meta["schema_version"] is None, meta


def test_a_legacy_vis_file_with_a_bad_micro_steps_or_node_type_is_a_400(api, logdir):
    graph = {"root": "DefaultModel", "node": {
        "DefaultModel": {"id": "DefaultModel", "node_type": 0, "upnode": "", "subnodes": ["A.0"], "data": {}},
        "A.0": {"id": "A.0", "node_type": "abc", "upnode": "DefaultModel", "subnodes": [], "data": {}}}}
    (logdir / "old").mkdir()
    (logdir / "old" / "micro.vis").write_text(json.dumps({"NPU": graph, "MicroSteps": "x"}), encoding="utf-8")
    status, body = api.get("/api/meta", run="old", file="micro.vis")
    assert status == 400 and body["error"] == 'micro.vis: MicroSteps holds "x", not a count', body
    (logdir / "old" / "type.vis").write_text(json.dumps({"NPU": graph}), encoding="utf-8")
    status, body = api.get("/api/root", run="old", file="type.vis", step=0, rank=0, side="NPU")
    assert status == 400 and body["error"] == "type.vis: column node_type of node 'A.0' holds 'abc', not an integer"


def test_a_stored_findings_exec_order_is_read_or_refused_naming_the_file():
    """The stored first divergence's exec_order: read as an integer, absent as None, anything else the 400 that
    names the index's file (its ``source``)."""
    from tbprobe.tb_plugin.findings import stored_finding
    from tbprobe.tb_plugin.graph_index import GraphIndex

    rows = [(NODE, 1, "DefaultModel", 1.0, 0, 0, True, 0), ("DefaultModel", 0, "", 0.0, 0, 0, True, 1)]
    idx = GraphIndex(rows, compare=True, source="run_7.vis.db")
    assert idx.source == "run_7.vis.db"
    for stored, read in ((None, None), ("", None), (3, 3), ("12", 12)):
        assert stored_finding(idx, {"name": NODE, "exec_order": stored})["exec_order"] == read, stored
    assert stored_finding(idx, {"name": NODE})["exec_order"] is None
    with pytest.raises(ApiError) as err:
        stored_finding(idx, {"name": NODE, "exec_order": "x"})
    assert (err.value.status, str(err.value)) == (
        400, f"run_7.vis.db: column tbprobe_findings.exec_order of node '{NODE}' holds 'x', not an integer")
