"""Read routes on every reference-built database: runs, meta, root, children, node, overflow, findings."""
import json
import os

import pytest

from tests.tb_plugin.conftest import db_file, fixture_dbs, sql


def test_runs_lists_every_database_at_any_depth_with_relative_runs(api, logdir):
    os.makedirs(logdir / "a" / "x")
    os.makedirs(logdir / "b" / "x")  # same folder name in two places: two different runs
    src = logdir / "out" / "build"
    name = os.listdir(src)[0]
    for d in ("a/x", "b/x"):
        (logdir / d / name).write_bytes((src / name).read_bytes())
    status, body = api.get("/api/runs")
    assert status == 200
    runs = {r["run"]: r["files"] for r in body["runs"]}
    for case, file in fixture_dbs():
        assert [f["file"] for f in runs[f"out/{case}"]] == [file]
    assert "a/x" in runs and "b/x" in runs
    assert runs["out/cmp_stat"][0]["graph_type"] == "compare"
    assert runs["out/build"][0]["graph_type"] == "build"
    assert runs["out/build"][0]["format"] == "db"


def test_new_file_appears_without_restart(api, logdir):
    _, before = api.get("/api/runs")
    assert "late" not in {r["run"] for r in before["runs"]}
    os.makedirs(logdir / "late")
    src = logdir / "out" / "build"
    name = os.listdir(src)[0]
    (logdir / "late" / name).write_bytes((src / name).read_bytes())
    _, after = api.get("/api/runs")
    assert "late" in {r["run"] for r in after["runs"]}


def test_a_corrupt_file_is_listed_with_its_error_and_refused_clearly(api, logdir):
    (logdir / "bad.vis.db").write_bytes(b"this is not sqlite" * 100)
    _, body = api.get("/api/runs")
    entry = [f for r in body["runs"] if r["run"] == "." for f in r["files"]][0]
    assert entry["graph_type"] is None and "bad.vis.db" in entry["error"]
    status, err = api.get("/api/meta", run=".", file="bad.vis.db")
    assert status == 400 and "bad.vis.db" in err["error"]


@pytest.mark.parametrize("case,file", fixture_dbs())
def test_meta_matches_tb_config(api, logdir, case, file):
    status, meta = api.get("/api/meta", run=f"out/{case}", file=file)
    assert status == 200
    (gtype, steps, ranks), = sql(logdir / "out" / case / file, "SELECT graph_type, step_list, rank_list FROM tb_config")
    assert meta["graph_type"] == gtype
    assert meta["steps"] == json.loads(steps) and meta["ranks"] == json.loads(ranks)
    assert meta["sides"] == (["NPU", "Bench"] if gtype == "compare" else ["NPU"])
    assert meta["writer"] == "msprobe"
    assert isinstance(meta["node_colors"], dict)


@pytest.mark.parametrize("case,file", fixture_dbs())
def test_walking_children_from_the_root_visits_every_node_once_in_order(api, logdir, case, file):
    _, meta = api.get("/api/meta", run=f"out/{case}", file=file)
    path = logdir / "out" / case / file
    for step in meta["steps"]:
        for rank in meta["ranks"]:
            for side in meta["sides"]:
                q = dict(run=f"out/{case}", file=file, step=step, rank=rank, side=side)
                status, root = api.get("/api/root", **q)
                assert status == 200, root
                expected = {name: (up, order) for name, up, order in sql(
                    path, "SELECT node_name, up_node, node_order FROM tb_nodes WHERE step=? AND rank=? AND"
                          " data_source=?", (step, rank, side))}
                seen = {root["name"]}
                todo = [root]
                while todo:
                    node = todo.pop()
                    status, page = api.get("/api/children", node=node["name"], **q)
                    assert status == 200
                    assert page["total"] == node["n_children"] == len(page["children"])
                    orders = [c["order"] for c in page["children"]]
                    assert orders == sorted(orders)  # execution order
                    for child in page["children"]:
                        assert expected[child["name"]][0] == node["name"]
                        assert child["name"] not in seen
                        seen.add(child["name"])
                        todo.append(child)
                assert seen == set(expected)


def test_root_summary_rolls_up_the_worst_result_of_the_subtree(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    status, root = api.get("/api/root", run=run, file=file, step=0, rank=0, side="NPU")
    assert status == 200
    worst = sql(logdir / run / file, "SELECT max(precision_index) FROM tb_nodes WHERE data_source='NPU'")[0][0]
    assert root["subtree_precision"] == worst
    assert root["subtree_overflow"] == "critical"  # exp(x*1000) in layer 1
    _, block = api.get("/api/children", run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    by_name = {c["name"]: c for c in block["children"]}
    assert by_name["Module.layers.1.Block.forward.0"]["subtree_overflow"] == "critical"
    assert by_name["Module.layers.0.Block.forward.0"]["subtree_overflow"] is None


def test_children_paging(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    _, whole = api.get("/api/children", **q)
    _, page = api.get("/api/children", offset=2, limit=3, **q)
    assert page["total"] == whole["total"] and page["offset"] == 2
    assert [c["name"] for c in page["children"]] == [c["name"] for c in whole["children"][2:5]]


def test_node_details_of_every_node(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    path = logdir / run / file
    for name, up, inp, out, link in sql(path, "SELECT node_name, up_node, input_data, output_data, matched_node_link"
                                             " FROM tb_nodes WHERE data_source='NPU'"):
        status, node = api.get("/api/node", run=run, file=file, step=0, rank=0, side="NPU", node=name)
        assert status == 200
        assert node["name"] == name and (node["parent"] or "") == up
        assert node["path"][-1] == name and node["path"][0] == "DefaultModel"
        keys = [p["key"] for p in node["inputs"] + node["outputs"] + node["parameters"]]
        stored = list(json.loads(inp or "{}")) + list(json.loads(out or "{}"))
        assert sorted(keys) == sorted(stored)
        link = json.loads(link or "[]")
        assert node["counterpart"] == (link[-1] if link else None)
    _, node = api.get("/api/node", run=run, file=file, step=0, rank=0, side="NPU",
                      node="Module.layers.1.fc.Linear.forward.0")
    weight = [p for p in node["parameters"] if p["key"].endswith("parameters.weight")][0]["fields"]
    assert weight["Max diff"] == pytest.approx(0.05, abs=1e-6)  # the perturbation of the debug side, as a number
    assert weight["MaxRelativeErr"].endswith("%") and weight["shape"] == "[8, 8]"
    assert node["stack"] and node["counterpart_data"]["outputs"]


def test_distributed_links_and_peers(api, logdir):
    run, file = db_file(logdir, "cmp_dist")
    status, node = api.get("/api/node", run=run, file=file, step=0, rank=0, side="NPU",
                           node="Distributed.send.0.forward")
    assert status == 200
    assert node["distributed"]["communications_type"] == "send"
    assert node["distributed"]["nodes_info"]["1"][1] == "Distributed.recv.0.forward"
    status, peer = api.get("/api/node", run=run, file=file, step=0, rank=1, side="NPU",
                           node="Distributed.recv.0.forward")
    assert status == 200 and peer["distributed"]["communications_type"] == "receive"


def test_multi_step_rank_graphs_and_missing_ones(api, logdir):
    run, file = db_file(logdir, "multi")
    for step in (0, 1):
        for rank in (0, 1):
            status, _ = api.get("/api/root", run=run, file=file, step=step, rank=rank, side="Bench")
            assert status == 200
    status, err = api.get("/api/root", run=run, file=file, step=7, rank=0, side="NPU")
    assert status == 404 and "step 7" in err["error"]
    run, file = db_file(logdir, "build")
    status, err = api.get("/api/root", run=run, file=file, step=0, rank=0, side="Bench")
    assert status == 404


def test_tp_merge_info_and_rank_collections(api, logdir):
    run, file = db_file(logdir, "merge_tp")
    status, node = api.get("/api/node", run=run, file=file, step=0, rank=0, side="NPU", node="Torch.exp.0.forward")
    assert status == 200 and "tensor parallelism" in node["parallel_merge_info"][0]
    _, kids = api.get("/api/children", run=run, file=file, step=0, rank=0, side="NPU",
                      node="Apis_Between_Modules_All_Ranks.0")
    assert {c["name"] for c in kids["children"]} >= {"Apis_Between_Modules_Rank0.0", "Apis_Between_Modules_Rank1.0"}


def test_overflow_list_in_execution_order_first_flagged(api, logdir):
    """"first" is where the overflow starts, the node /api/findings and `tbprobe graph` name: the earliest
    critical one (finite inputs, an Inf/NaN output). It was the earliest of any level: here a high Tensor.__mul__
    whose input is Inf already, which the Overflow tab then tagged as the start."""
    run, file = db_file(logdir, "cmp_stat")
    status, body = api.get("/api/overflow", run=run, file=file, step=0, rank=0)
    assert status == 200
    expected = sql(logdir / run / file, "SELECT node_name FROM tb_nodes WHERE data_source='NPU' AND"
                                        " overflow_level IS NOT NULL AND overflow_level != '' ORDER BY node_order")
    assert [i["name"] for i in body["items"]] == [r[0] for r in expected]
    assert [(i["name"], i["overflow"]) for i in body["items"]] == [("Tensor.__mul__.1.forward", "high"),
                                                                   ("Torch.exp.0.forward", "critical")]
    assert [i["first"] for i in body["items"]] == [False, True]
    _, findings = api.get("/api/findings", run=run, file=file, step=0, rank=0)
    assert findings["first_overflow"]["name"] == "Torch.exp.0.forward"


def test_findings_computed_for_msprobe_files(api, logdir):
    run, file = db_file(logdir, "cmp_tensor")
    status, body = api.get("/api/findings", run=run, file=file, step=0, rank=0)
    assert status == 200 and body["source"] == "computed"
    errors = sql(logdir / run / file, "SELECT node_name, node_order, sub_nodes FROM tb_nodes WHERE data_source='NPU'"
                                      " AND precision_index = 1 ORDER BY node_order")
    leaves = [r for r in errors if not r[2]]
    assert body["first_divergence"]["name"] == (leaves or errors)[0][0]
    assert body["first_overflow"]["overflow"] == "critical"


def _set_rows(db, side: str, changes: dict) -> None:
    """Edit rows of a copied database: node name -> {overflow_level, output/input item fields to set, items to
    add}."""
    import sqlite3

    conn = sqlite3.connect(str(db))
    with conn:
        for name, change in changes.items():
            (inp, outp), = conn.execute("SELECT input_data, output_data FROM tb_nodes WHERE data_source = ? AND"
                                        " node_name = ?", (side, name)).fetchall()
            inp, outp = json.loads(inp or "{}"), json.loads(outp or "{}")
            for key, fields in change.get("output", {}).items():
                outp[f"{name}.output.{key}"].update(fields)
            for key, item in change.get("add_input", {}).items():
                inp[f"{name}.input.{key}"] = item
            conn.execute("UPDATE tb_nodes SET overflow_level = ?, input_data = ?, output_data = ? WHERE"
                         " data_source = ? AND node_name = ?",
                         (change["overflow"], json.dumps(inp), json.dumps(outp), side, name))
    conn.close()


def _firsts(api, run, file, side):
    status, body = api.get("/api/overflow", run=run, file=file, step=0, rank=0, side=side)
    assert status == 200, body
    return [i["name"] for i in body["items"] if i["first"]]


def test_overflow_first_is_none_on_either_side_when_no_node_is_critical(api, logdir):
    """Every overflow node high (a norm ratio past 100 and Inf carried on), none critical: no node is where an
    overflow starts. The bench side (and the findings of msprobe's files) fell back to the earliest high node,
    where the debug graph of tbprobe's files names none (the builder's rule)."""
    run, file = db_file(logdir, "cmp_stat")
    _set_rows(logdir / run / file, "NPU", {"Torch.exp.0.forward": {"overflow": "high"}})
    _set_rows(logdir / run / file, "Bench", {"Tensor.__add__.1.forward": {"overflow": "high"}})
    for side in ("NPU", "Bench"):
        status, body = api.get("/api/overflow", run=run, file=file, step=0, rank=0, side=side)
        assert status == 200 and body["total"] >= 1 and {i["overflow"] for i in body["items"]} == {"high"}
        assert _firsts(api, run, file, side) == [], side
    _, findings = api.get("/api/findings", run=run, file=file, step=0, rank=0)
    assert findings["source"] == "computed" and findings["first_overflow"] is None


def test_overflow_first_on_the_bench_side_follows_the_builders_rule(api, logdir):
    """The bench side's "first" skips, as rollup.first_overflow does, a critical node whose non-finite output a
    non-finite argument supplies (masked_fill(mask, -inf)) and one whose counterpart overflows the same way;
    it was the earliest critical node, whatever its cause."""
    run, file = db_file(logdir, "cmp_stat")
    db = logdir / run / file
    inf_out = {"0": {"Max": "inf", "Mean": "inf", "Norm": "inf", "inf_count": "3"}}
    minus_inf = {"type": "float", "value": "-inf", "data_name": "-1", "requires_grad": "null", "Max": "-inf",
                 "Min": "-inf", "Mean": "-inf", "Norm": "-inf", "dtype": "<class float>", "shape": "[]"}
    _set_rows(db, "Bench", {
        # the earliest: -inf comes from its scalar argument
        "Tensor.__add__.0.forward": {"overflow": "critical", "add_input": {"1": minus_inf},
                                     "output": {"0": {"Min": "-inf", "Mean": "-inf", "Norm": "inf"}}},
        "Functional.relu.1.forward": {"overflow": "critical", "output": inf_out},    # as its counterpart does
        "Functional.linear.3.forward": {"overflow": "critical", "output": inf_out},  # its counterpart is finite
    })
    _set_rows(db, "NPU", {"Functional.relu.1.forward": {"overflow": "critical", "output": inf_out}})
    assert _firsts(api, run, file, "Bench") == ["Functional.linear.3.forward"]
    # the debug side by the same rule: its relu.1 overflows as its counterpart does; Torch.exp is where it starts
    assert _firsts(api, run, file, "NPU") == ["Torch.exp.0.forward"]
    _, findings = api.get("/api/findings", run=run, file=file, step=0, rank=0)
    assert findings["first_overflow"]["name"] == "Torch.exp.0.forward"


def test_micro_step_filter(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    _, all_steps = api.get("/api/children", **q)
    _, step0 = api.get("/api/children", micro_step=0, **q)
    _, step5 = api.get("/api/children", micro_step=5, **q)
    assert step0["total"] == all_steps["total"] and step5["total"] == 0


_COMPACT_DEFAULTS = {"precision": None, "subtree_precision": None, "overflow": 0, "subtree_overflow": 0,
                     "matched": 1, "micro_step": 0}


def _full(compact: dict, start: int, count: int) -> dict:
    """A compact page's columns from ``start``, every field present (a left-out field has its default)."""
    out = {k: compact[k][start: start + count] for k in ("name", "type", "n_children", "order")}
    for key, default in _COMPACT_DEFAULTS.items():
        out[key] = compact[key][start: start + count] if key in compact else [default] * count
    out["manual"] = [p - start for p in compact.get("manual", []) if start <= p < start + count]
    return out


def _children_compact(api, q, node):
    _, page = api.get("/api/children", node=node, compact=1, limit=2000, **q)
    return page


def test_path_children_answers_every_level_of_a_path_in_one_request(api, logdir):
    """The page opened the path to a node with one /api/children per level, one after the other (a node 20,000
    levels deep never showed). /api/path_children gives every ancestor's first page at once, as /api/children
    would, side-file edits included."""
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU")
    _, node = api.get("/api/node", node="Tensor.__mul__.1.forward", **q)
    api.post("/api/unmatch", dict(run=run, file=file, step=0, rank=0, debug="Module.layers.1.Block.forward.0",
                                  descendants=False))
    status, body = api.get("/api/path_children", node="Tensor.__mul__.1.forward", **q)
    assert status == 200 and body["complete"] is True and body["path"] == node["path"]
    assert [lv["node"] for lv in body["levels"]] == node["path"][:-1]
    start = 0
    for lv in body["levels"]:
        want = _children_compact(api, q, lv["node"])
        assert lv["total"] == want["total"] and lv["count"] == len(want["compact"]["name"])
        assert _full(body["compact"], start, lv["count"]) == _full(want["compact"], 0, lv["count"]), lv["node"]
        start += lv["count"]
    assert "manual" in body["compact"]      # (the unmatch above shows in its level)
    assert api.get("/api/path_children", node="No.such.node", **q)[0] == 404
    assert api.get("/api/path_children", node="DefaultModel", **q)[1]["levels"] == []


def test_path_children_of_a_deep_chain_and_its_budget(tmp_path, monkeypatch):
    from tbprobe.tb_plugin import graph_data
    from tests.tb_plugin.conftest import make_api
    from tests.tb_plugin.synth_db import chain_name, make_chain_db

    (tmp_path / "deep").mkdir()
    make_chain_db(str(tmp_path / "deep" / "chain.vis.db"), depth=5000)
    api = make_api(tmp_path)
    q = dict(run="deep", file="chain.vis.db", step=0, rank=0, side="NPU")
    status, body = api.get("/api/path_children", node=chain_name(4999), **q)
    assert status == 200 and body["complete"] is True and len(body["path"]) == 5001 and len(body["levels"]) == 5000
    assert body["compact"]["name"] == [chain_name(i) for i in range(5000)]
    monkeypatch.setattr(graph_data, "PATH_CHILDREN_BUDGET", 10)
    status, body = api.get("/api/path_children", node=chain_name(4999), **q)
    assert status == 200 and body["complete"] is False and len(body["levels"]) == 10 and len(body["path"]) == 5001


def test_depth_children_answers_an_expand_to_depth_in_one_request(api, logdir):
    """"Expand to depth" asked /api/children once per node (6,000 requests and 63 s for two sides of a module with
    5,000 children). /api/depth_children gives the first page of every node it opens, breadth first, as
    /api/children would, at most max_nodes of them (then `capped`)."""
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU")
    _, root = api.get("/api/root", **q)
    # the nodes expand-to-depth 3 opens, breadth first, asked for one by one
    want, frontier = [], [root["name"]]
    for _ in range(3):
        following = []
        for name in frontier:
            page = _children_compact(api, q, name)
            if page["total"]:
                want.append((name, page))
                following.extend(page["compact"]["name"])
        frontier = following
    status, body = api.get("/api/depth_children", depth=3, **q)
    assert status == 200 and body["complete"] is True and body["capped"] is False
    assert [lv["node"] for lv in body["levels"]] == [name for name, _ in want] and len(want) > 3
    start = 0
    for lv, (name, page) in zip(body["levels"], want):
        assert lv["total"] == page["total"] and lv["count"] == len(page["compact"]["name"])
        assert _full(body["compact"], start, lv["count"]) == _full(page["compact"], 0, lv["count"]), name
        start += lv["count"]
    _, few = api.get("/api/depth_children", depth=3, max_nodes=2, **q)
    assert few["capped"] is True and [lv["node"] for lv in few["levels"]] == [name for name, _ in want[:2]]
    assert api.get("/api/depth_children", depth=0, **q)[0] == 400
