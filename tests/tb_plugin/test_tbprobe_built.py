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
