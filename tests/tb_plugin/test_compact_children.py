"""`/api/children?compact=1`: the same summaries as the object form, one array per field, defaults left out."""
import pytest

from tests.tb_plugin.compact_form import expand_compact
from tests.tb_plugin.conftest import db_file, fixture_dbs


def walk_both(api, q, side):
    """Every (object form, compact form) child list of a graph, from the root down."""
    _, root = api.get("/api/root", side=side, **q)
    todo, seen = [root["name"]], 0
    while todo:
        node = todo.pop()
        _, plain = api.get("/api/children", side=side, node=node, **q)
        status, compact = api.get("/api/children", side=side, node=node, compact=1, **q)
        assert status == 200 and "children" not in compact
        assert (compact["total"], compact["offset"], compact["node"]) == (plain["total"], plain["offset"], node)
        yield plain["children"], expand_compact(compact), compact["compact"]
        todo += [c["name"] for c in plain["children"] if c["n_children"]]
        seen += 1
    assert seen > 0


@pytest.mark.parametrize("case,file", [c for c in fixture_dbs() if c[0] in ("cmp_stat", "build", "cmp_dist")])
def test_compact_children_equal_the_object_form(api, logdir, case, file):
    run, file = db_file(logdir, case)
    _, meta = api.get("/api/meta", run=run, file=file)
    q = dict(run=run, file=file, step=meta["steps"][0], rank=meta["ranks"][0])
    for side in meta["sides"]:
        for plain, rebuilt, _ in walk_both(api, q, side):
            assert rebuilt == plain


def test_compact_children_carry_manual_edits_and_leave_defaults_out(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0)
    module = "Module.layers.0.Block.forward.0"
    status, _ = api.post("/api/unmatch", dict(q, debug=module, descendants=True))
    assert status == 200
    _, parent = api.get("/api/node", side="NPU", node=module, **q)
    _, plain = api.get("/api/children", side="NPU", node=module, **q)
    _, compact = api.get("/api/children", side="NPU", node=module, compact=1, **q)
    assert expand_compact(compact) == plain["children"]
    cols = compact["compact"]
    assert cols["manual"] == list(range(len(plain["children"])))  # every child was unmatched by hand
    assert cols["matched"] == [0] * len(plain["children"])
    assert "micro_step" not in cols and "overflow" not in cols  # all at their defaults here
    assert parent["name"] == module


def test_compact_children_paging_and_errors(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    _, whole = api.get("/api/children", **q)
    _, page = api.get("/api/children", offset=1, limit=2, compact=1, **q)
    assert page["compact"]["name"] == [c["name"] for c in whole["children"][1:3]]
    assert api.get("/api/children", compact="maybe", **q)[0] == 400
    assert api.get("/api/children", compact=1, **dict(q, node="nope"))[0] == 404
