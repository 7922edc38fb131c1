"""A database written by ``tbprobe graph`` (with tbprobe's own tables) is served like msprobe's."""
import os
import shutil

from tests.tb_plugin.conftest import make_api


def test_tbprobe_built_database(tbprobe_db, tmp_path):
    shutil.copy(tbprobe_db, tmp_path / os.path.basename(tbprobe_db))
    api = make_api(tmp_path)
    file = os.path.basename(tbprobe_db)
    status, meta = api.get("/api/meta", run=".", file=file)
    assert status == 200 and meta["writer"] == "tbprobe" and meta["schema_version"] >= 1
    q = dict(run=".", file=file, step=0, rank=0)
    roots = {}
    for side in ("NPU", "Bench"):
        _, root = roots[side] = api.get("/api/root", side=side, **q)
        todo, seen = [root["name"]], 1
        while todo:
            _, page = api.get("/api/children", side=side, node=todo.pop(), **q)
            todo += [c["name"] for c in page["children"]]
            seen += len(page["children"])
        assert seen > 40
    assert roots["NPU"][1]["subtree_overflow"] == "critical" and roots["Bench"][1]["subtree_overflow"] is None
    status, findings = api.get("/api/findings", **q)
    assert status == 200 and findings["source"] == "stored"
    first = findings["first_overflow"]  # as the graph builder stored it
    assert first["name"] and first["path"][-1] == first["name"] and first["overflow"]
    status, node = api.get("/api/node", side="NPU", node="Torch.exp.0.forward", **q)
    assert status == 200 and node["overflow"] == "critical"
    status, ov = api.get("/api/overflow", **q)
    orders = [i["exec_order"] for i in ov["items"]]
    assert orders == sorted(orders) and len(orders) == 2
    assert [i["name"] for i in ov["items"] if i["first"]] == [first["name"]]   # where it starts, as stored



def _copy(tbprobe_db, folder, sql_statements):
    import sqlite3

    os.makedirs(folder)
    file = os.path.basename(tbprobe_db)
    shutil.copy(tbprobe_db, folder / file)
    conn = sqlite3.connect(str(folder / file))
    with conn:
        for statement in sql_statements:
            conn.execute(statement)
    conn.close()
    return make_api(folder), dict(run=".", file=file, step=0, rank=0)


def test_no_side_flags_a_first_overflow_when_no_node_is_critical(tbprobe_db, tmp_path):
    """Every overflow node high (none critical): the debug side, stored, names no first overflow, and the bench
    side, which has no stored finding, flagged its earliest high node as where the overflow starts."""
    api, q = _copy(tbprobe_db, tmp_path / "high", [
        "UPDATE tb_nodes SET overflow_level = 'high' WHERE overflow_level = 'critical'",
        "DELETE FROM tbprobe_findings WHERE kind = 'first_overflow'",
        "UPDATE tb_nodes SET overflow_level = 'high' WHERE data_source = 'Bench' AND node_name ="
        " (SELECT node_name FROM tb_nodes WHERE data_source = 'Bench' AND sub_nodes = '' LIMIT 1)"])
    _, found = api.get("/api/findings", **q)
    assert found["source"] == "stored" and found["first_overflow"] is None
    for side in ("NPU", "Bench"):
        status, ov = api.get("/api/overflow", side=side, **q)
        assert status == 200 and ov["items"] and {i["overflow"] for i in ov["items"]} == {"high"}, side
        assert [i["name"] for i in ov["items"] if i["first"]] == [], side


def test_the_computed_first_overflow_is_the_stored_one(tbprobe_db, tmp_path):
    """The plugin computes the first overflow (the bench side's, msprobe's files') by the graph builder's rule:
    on a tbprobe file whose findings table is gone it names the node the builder stored."""
    _, stored = make_api(os.path.dirname(tbprobe_db)).get("/api/findings", run=".", file=os.path.basename(
        tbprobe_db), step=0, rank=0)
    api, q = _copy(tbprobe_db, tmp_path / "computed", ["DROP TABLE tbprobe_findings"])
    _, computed = api.get("/api/findings", **q)
    assert computed["source"] == "computed" and stored["source"] == "stored"
    assert computed["first_overflow"]["name"] == stored["first_overflow"]["name"]
    _, ov = api.get("/api/overflow", side="NPU", **q)
    assert [i["name"] for i in ov["items"] if i["first"]] == [stored["first_overflow"]["name"]]
