"""Manual matches and legend edits go to side files; the database changes only on an explicit apply."""
import hashlib
import json
import os

from tests.tb_plugin.conftest import db_file, sql


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_match_writes_the_reference_side_file_and_never_the_database(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    db = logdir / run / file
    before = _digest(db)
    status, body = api.post("/api/match", dict(run=run, file=file, step=0, rank=0, debug="Tensor.__mul__.1.forward",
                                               bench="Tensor.__add__.1.forward", descendants=False))
    assert status == 200, body
    tag = file[: -len(".vis.db")]
    assert body["file"] == f"{tag}_0_0.vis.config"
    with open(logdir / run / body["file"], encoding="utf-8") as f:
        assert json.load(f) == {"Tensor.__mul__.1.forward": "Tensor.__add__.1.forward"}
    changed = {(c["side"], c["name"]): c for c in body["changed"]}
    assert changed[("NPU", "Tensor.__mul__.1.forward")]["matched"] is True
    # precision recomputed by the graph builder's compare (the stored row had none: it was unmatched)
    assert changed[("NPU", "Tensor.__mul__.1.forward")]["precision"] in (0.0, 0.5, 1.0)
    assert changed[("Bench", "Tensor.__add__.1.forward")]["matched"] is True
    assert _digest(db) == before
    assert sorted(os.listdir(logdir / run)) == sorted([file, body["file"]])  # no -wal/-shm left by reads
    # a fresh server (a reload) shows it
    from tests.tb_plugin.conftest import make_api
    again = make_api(logdir)
    _, matches = again.get("/api/matches", run=run, file=file, step=0, rank=0)
    assert matches["matches"] == {"Tensor.__mul__.1.forward": "Tensor.__add__.1.forward"}
    _, kids = again.get("/api/children", run=run, file=file, step=0, rank=0, side="NPU",
                        node="Module.layers.1.Block.forward.0")
    mul = [c for c in kids["children"] if c["name"] == "Tensor.__mul__.1.forward"][0]
    assert mul["matched"] is True and mul["manual"] is True
    _, node = again.get("/api/node", run=run, file=file, step=0, rank=0, side="NPU", node="Tensor.__mul__.1.forward")
    assert node["counterpart"] == "Tensor.__add__.1.forward"


def test_match_unknown_nodes_is_404_and_writes_nothing(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    status, _ = api.post("/api/match", dict(run=run, file=file, step=0, rank=0, debug="nope", bench="DefaultModel"))
    assert status == 404
    status, _ = api.post("/api/match", dict(run=run, file=file, step=0, rank=0, debug="DefaultModel", bench="nope"))
    assert status == 404
    assert not [n for n in os.listdir(logdir / run) if n.endswith(".vis.config")]
    run, file = db_file(logdir, "build")
    status, body = api.post("/api/match", dict(run=run, file=file, step=0, rank=0, debug="DefaultModel",
                                               bench="DefaultModel"))
    assert status in (400, 404)


def test_unmatch_with_descendants_and_rematch(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0)
    module = "Module.layers.0.Block.forward.0"
    status, body = api.post("/api/unmatch", dict(q, debug=module, descendants=True))
    assert status == 200
    _, kids = api.get("/api/children", side="NPU", node=module, **q)
    assert kids["children"] and all(not c["matched"] and c["precision"] is None for c in kids["children"])
    _, bench_kids = api.get("/api/children", side="Bench", node=module, **q)
    assert all(not c["matched"] for c in bench_kids["children"])
    _, m = api.get("/api/matches", **q)
    assert module in m["unmatched"] and not m["matches"]
    status, body = api.post("/api/match", dict(q, debug=module, bench=module, descendants=True))
    assert status == 200
    _, kids = api.get("/api/children", side="NPU", node=module, **q)
    assert all(c["matched"] for c in kids["children"])
    _, m = api.get("/api/matches", **q)
    assert m["unmatched"] == [] and m["matches"][module] == module
    assert len(m["matches"]) == 1 + sum(1 for _ in sql(logdir / run / file,
        "WITH RECURSIVE d(n) AS (SELECT ? UNION SELECT node_name FROM tb_nodes, d WHERE up_node = d.n"
        " AND data_source='NPU') SELECT n FROM d", (module,))) - 1


def test_legend_edit_validation_and_readback(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    colors = {"#00FF00": {"value": [0, 0.5], "description": "ok", "accuracy_level": "pass"},
              "#FFFF00": {"value": [0.5, 0.8], "description": "hm", "accuracy_level": "warning"},
              "#FF0000": {"value": [0.8, 1], "description": "bad", "accuracy_level": "error"},
              "#C7C7C7": {"value": [], "description": "none", "accuracy_level": "unmatched node"}}
    status, body = api.post("/api/legend", dict(run=run, file=file, node_colors=colors))
    assert status == 200
    status, legend = api.get("/api/legend", run=run, file=file)
    assert legend["edited"] is True and legend["node_colors"]["#00FF00"]["value"] == [0, 0.5]
    _, meta = api.get("/api/meta", run=run, file=file)
    assert meta["node_colors"] == legend["node_colors"]
    assert os.path.exists(logdir / run / (file + ".legend.json"))
    for bad in ({}, {"red": {"value": []}}, {"#GG0000": {"value": []}}, {"#FF0000": {"value": "x"}},
                {"#FF0000": {"value": [0, 1, 2]}}):
        assert api.post("/api/legend", dict(run=run, file=file, node_colors=bad))[0] == 400


def test_apply_folds_in_a_log_left_behind_and_refuses_one_in_use(api, logdir):
    """A live graph closed while TensorBoard read it leaves its -wal behind (no read-only reader can remove
    it): apply took any -wal for a writer at work and refused for good. It folds a log in that nothing holds,
    and still refuses while another connection reads or writes."""
    import sqlite3

    run, file = db_file(logdir, "cmp_stat")
    db = logdir / run / file
    q = dict(run=run, file=file, step=0, rank=0)
    api.post("/api/match", dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward"))
    holder = sqlite3.connect(str(db))
    holder.execute("PRAGMA journal_mode=WAL")
    holder.isolation_level = None
    holder.execute("BEGIN IMMEDIATE")    # (a writer at work: the checkpoint waits for it, in vain)
    holder.execute("UPDATE tb_config SET micro_steps = micro_steps")
    assert os.path.exists(f"{db}-wal")
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 409 and "being written" in body["error"]
    holder.execute("COMMIT")
    with open(f"{db}-wal", "rb") as f:
        left = f.read()
    holder.close()
    with open(f"{db}-wal", "wb") as f:   # (the log a closed live graph leaves when a reader kept it)
        f.write(left)
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200, body


def test_apply_backs_up_then_writes_the_edits(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    db = logdir / run / file
    q = dict(run=run, file=file, step=0, rank=0)
    assert api.post("/api/apply", dict(run=run, file=file))[0] == 409  # nothing to apply yet
    before = _digest(db)
    api.post("/api/match", dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward"))
    api.post("/api/unmatch", dict(q, debug="Module.head.Linear.forward.0"))
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200, body
    backup = logdir / run / body["backup"]
    assert _digest(backup) == before
    (link, modified), = sql(db, "SELECT matched_node_link, modified FROM tb_nodes WHERE data_source='NPU' AND"
                                " node_name='Tensor.__mul__.1.forward'")
    assert json.loads(link)[-1] == "Tensor.__add__.1.forward" and modified == 1
    (prec, out), = sql(db, "SELECT precision_index, output_data FROM tb_nodes WHERE data_source='NPU' AND"
                           " node_name='Tensor.__mul__.1.forward'")
    assert prec in (0, 0.5, 1) and "Max diff" in out
    (link,), = sql(db, "SELECT matched_node_link FROM tb_nodes WHERE data_source='NPU' AND"
                       " node_name='Module.head.Linear.forward.0'")
    assert json.loads(link) == []
    _, node = api.get("/api/node", side="NPU", node="Tensor.__mul__.1.forward", **q)  # the server sees the new file
    assert node["matched_node_link"][-1] == "Tensor.__add__.1.forward"


def test_apply_folds_the_side_files_in_once_a_second_apply_is_409_and_a_new_edit_applies_again(api, logdir,
                                                                                               monkeypatch):
    """After an apply the edits are the database's: their side files are retired (renamed beside its backup,
    with its timestamp: the pair is the file as it was), so a second apply is the documented 409 instead of
    200 with `nodes_updated: 4` and another backup each time, and the page shows the applied matches and
    legend as stored ones. A new edit applies again; edits the database holds already update no node and make
    no backup."""
    import types

    from tbprobe.tb_plugin import edits

    stamps = iter(f"2026010100000{i}" for i in range(10))
    monkeypatch.setattr(edits, "time", types.SimpleNamespace(strftime=lambda fmt: next(stamps)))
    run, file = db_file(logdir, "cmp_stat")
    folder, tag = logdir / run, file[: -len(".vis.db")]
    q = dict(run=run, file=file, step=0, rank=0)
    mul, add, head = "Tensor.__mul__.1.forward", "Tensor.__add__.1.forward", "Module.head.Linear.forward.0"
    assert api.post("/api/match", dict(q, debug=mul, bench=add))[0] == 200
    assert api.post("/api/unmatch", dict(q, debug=head))[0] == 200
    status, edited = api.post("/api/legend", dict(run=run, file=file, node_colors=_legend()))
    assert status == 200
    side_files = [f"{tag}_0_0.vis.config", f"{tag}_0_0.vis.unmatch.json", f"{file}.legend.json"]
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200, body
    assert body["backup"] == f"{file}.bak-20260101000000" and body["legend"] is True
    status, again = api.post("/api/apply", dict(run=run, file=file))
    assert status == 409 and again["error"].startswith("nothing to apply"), again  # no second backup either
    assert body["nodes_updated"] >= 3 and sorted(body["side_files"]) == sorted(side_files)
    assert sorted(os.listdir(folder)) == sorted([file, body["backup"]] + [n + ".bak-20260101000000"
                                                                          for n in side_files])
    # the page after it: the applied matches and legend, now stored, no pending manual edit
    _, node = api.get("/api/node", side="NPU", node=mul, **q)
    assert node["counterpart"] == add and node["matched"] is True
    _, kids = api.get("/api/children", side="NPU", node="Module.layers.1.Block.forward.0", **q)
    shown = {c["name"]: c for c in kids["children"]}[mul]
    assert shown["matched"] is True and "manual" not in shown
    _, node = api.get("/api/node", side="NPU", node=head, **q)
    assert node["counterpart"] is None and node["matched"] is False
    _, legend = api.get("/api/legend", run=run, file=file)
    assert legend == {"node_colors": edited["node_colors"], "edited": False}
    _, matches = api.get("/api/matches", **q)
    assert matches["matches"] == {} and matches["unmatched"] == []


    assert api.post("/api/match", dict(q, debug=FC0, bench=ACT1))[0] == 200      # a new edit applies again
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200 and body["backup"] == f"{file}.bak-20260101000001" and body["nodes_updated"] >= 2, body
    assert _partner(api, q, "NPU", FC0) == (ACT1, True)

    # edits the database holds already (the first match made again): nothing written, no backup
    assert api.post("/api/match", dict(q, debug=mul, bench=add))[0] == 200
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200 and body == {"backup": None, "nodes_updated": 0, "legend": False,
                                      "side_files": [f"{tag}_0_0.vis.config"]}, body
    assert not (folder / f"{tag}_0_0.vis.config").exists()
    assert len([n for n in os.listdir(folder) if n.startswith(f"{file}.bak-")]) == 2
    assert api.post("/api/apply", dict(run=run, file=file))[0] == 409


def test_reapplying_edits_the_database_holds_updates_no_node(api, logdir, monkeypatch):
    """An apply rewrote the row of every node its side files pair manually or leave without a counterpart,
    whether or not the database held it already: the same edits applied again reported `nodes_updated: 3` here
    (the manual pair's two nodes and the unmatched one), with a backup each time. Only rows that change are
    written and counted; when none does, nothing is written or backed up."""
    import types

    from tbprobe.tb_plugin import edits

    stamps = iter(f"2026010100000{i}" for i in range(10))
    monkeypatch.setattr(edits, "time", types.SimpleNamespace(strftime=lambda fmt: next(stamps)))
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0)
    made = []
    for _ in range(2):
        api.post("/api/match", dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward"))
        api.post("/api/unmatch", dict(q, debug="Module.layers.0.Block.forward.0"))
        status, body = api.post("/api/apply", dict(run=run, file=file))
        assert status == 200, body
        made.append((body["nodes_updated"], body["backup"]))
    assert made[0][0] == 5 and made[0][1] and made[1] == (0, None), made
    assert len([n for n in os.listdir(logdir / run) if n.startswith(f"{file}.bak-")]) == 1


def test_an_apply_with_nothing_to_write_retires_the_side_files_to_copies(api, logdir, tmp_path, monkeypatch):
    """When the database held every edit already, the apply removed the user's side files with no copy; they are
    retired to `<side file>.bak-<stamp>` as after a write (their names reserved exclusively first: one a link
    holds is refused and nothing is touched), with `"backup": null` for the database it did not copy."""
    import types

    from tbprobe.tb_plugin import edits

    stamps = iter(["20260101000000", "20260101000001", "20260101000001", "20260101000002"])
    monkeypatch.setattr(edits, "time", types.SimpleNamespace(strftime=lambda fmt: next(stamps)))
    run, file = db_file(logdir, "cmp_stat")
    folder = logdir / run
    q = dict(run=run, file=file, step=0, rank=0)
    match = dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward")
    assert api.post("/api/match", match)[0] == 200
    assert api.post("/api/apply", dict(run=run, file=file))[0] == 200
    assert api.post("/api/match", match)[0] == 200                      # the same edit again: the database has it
    side = f"{file[:-len('.vis.db')]}_0_0.vis.config"
    with open(folder / side, "rb") as f:
        content = f.read()
    os.symlink(tmp_path / "victim", folder / f"{side}.bak-20260101000001")
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 403 and f"{side}.bak-20260101000001 is a symbolic link" in body["error"], body
    assert not os.path.lexists(tmp_path / "victim") and (folder / side).exists()
    os.unlink(folder / f"{side}.bak-20260101000001")
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200 and body == {"backup": None, "nodes_updated": 0, "legend": False, "side_files": [side]}
    assert not (folder / side).exists()
    with open(folder / f"{side}.bak-20260101000001", "rb") as f:
        assert f.read() == content
    assert sorted(n for n in os.listdir(folder) if n.startswith(f"{file}.bak-")) == [f"{file}.bak-20260101000000"]


def _legend(**over):
    colors = {"#FFFCF3": {"value": [0, 0.3], "accuracy_level": "pass"},
              "#FFDC7F": {"value": [0.3, 0.6], "accuracy_level": "warning"},
              "#FF704D": {"value": [0.6, 1], "accuracy_level": "error"},
              "#C7C7C7": {"value": [], "accuracy_level": "unmatched node"}}
    colors.update(over)
    return colors


def test_legend_refuses_clashing_entries_and_bad_ranges(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    side_file = logdir / run / (file + ".legend.json")
    cases = {
        "same colour": _legend(**{"#ffdc7f": {"value": [0.9, 0.95]}}),
        "same colour, short form": _legend(**{"#CCC": {"value": [0.95, 1]}, "#CCCCCC": {"value": [2, 3]}}),
        "overlapping ranges": _legend(**{"#000001": {"value": [0.5, 0.7]}}),
        "two unmatched entries": _legend(**{"#000001": {"value": []}}),
        "low above high": _legend(**{"#FFFCF3": {"value": [1, 0]}}),
    }
    for why, colors in cases.items():
        status, body = api.post("/api/legend", dict(run=run, file=file, node_colors=colors))
        assert status == 400 and "#" in body["error"], (why, body)
    for raw in ("NaN, 1", "0, Infinity", "-Infinity, 0"):
        body = '{"run": "%s", "file": "%s", "node_colors": {"#FFFCF3": {"value": [%s]}}}' % (run, file, raw)
        status, reply = api.post("/api/legend", body)
        assert status == 400 and "finite" in reply["error"], (raw, reply)
    # one colour twice in the body: json.loads would keep the last and drop the other entry
    body = '{"run": "%s", "file": "%s", "node_colors": {"#FFDC7F": {"value": [0, 0.3]}, "#FFDC7F": {"value": []}}}'
    status, reply = api.post("/api/legend", body % (run, file))
    assert status == 400 and "#FFDC7F" in reply["error"]
    assert not side_file.exists()
    assert api.post("/api/legend", dict(run=run, file=file, node_colors=_legend()))[0] == 200  # ranges may touch


FC0, FC1 = "Module.layers.0.fc.Linear.forward.0", "Module.layers.1.fc.Linear.forward.0"
ACT1 = "Module.layers.1.act.ReLU.forward.0"


def _partner(api, q, side, name):
    """(counterpart, matched) of a node, after checking that its link leads to that counterpart."""
    _, node = api.get("/api/node", side=side, node=name, **q)
    peer, link = node["counterpart"], node["matched_node_link"]
    if peer is None:
        assert link == [], (side, name, link)
    else:
        other = "Bench" if side == "NPU" else "NPU"
        _, peer_node = api.get("/api/node", side=other, node=peer, **q)
        assert link == peer_node["path"], (side, name, link)
    return peer, node["matched"]


def test_a_rematch_leaves_every_node_one_counterpart_in_the_answers_and_the_applied_database(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0)
    status, body = api.post("/api/match", dict(q, debug=FC0, bench=ACT1))
    assert status == 200, body
    assert _partner(api, q, "NPU", FC0) == (ACT1, True)
    assert _partner(api, q, "Bench", ACT1) == (FC0, True)
    assert _partner(api, q, "Bench", FC0) == (None, False)  # the debug node's old partner
    assert _partner(api, q, "NPU", ACT1) == (None, False)  # the bench node's old partner
    changed = {(c["side"], c["name"]): c["matched"] for c in body["changed"]}
    assert changed == {("NPU", FC0): True, ("Bench", ACT1): True, ("Bench", FC0): False, ("NPU", ACT1): False}
    _, kids = api.get("/api/children", side="Bench", node="Module.layers.0.Block.forward.0", **q)
    assert {c["name"]: c["matched"] for c in kids["children"]}[FC0] is False

    # a second debug node takes the same bench node: the first one is left with none, not two claims
    status, body = api.post("/api/match", dict(q, debug=FC1, bench=ACT1))
    assert status == 200, body
    assert _partner(api, q, "Bench", ACT1) == (FC1, True)
    assert _partner(api, q, "NPU", FC0) == (None, False)
    assert _partner(api, q, "Bench", FC1) == (None, False)
    assert ("NPU", FC0) in {(c["side"], c["name"]) for c in body["changed"]}

    assert api.post("/api/apply", dict(run=run, file=file))[0] == 200
    links = {(side, name): json.loads(link)[-1] if json.loads(link) else None for side, name, link in sql(
        logdir / run / file, "SELECT data_source, node_name, matched_node_link FROM tb_nodes WHERE node_name IN"
        " (?, ?, ?)", (FC0, FC1, ACT1))}
    assert links == {("NPU", FC0): None, ("NPU", FC1): ACT1, ("NPU", ACT1): None,
                     ("Bench", FC0): None, ("Bench", FC1): None, ("Bench", ACT1): FC1}


def test_a_fractional_step_in_a_json_body_is_refused_like_in_a_query(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    for route, body in (("/api/match", dict(debug=FC0, bench=FC0)), ("/api/unmatch", dict(debug=FC0))):
        status, reply = api.post(route, dict(body, run=run, file=file, step=1.5, rank=0))
        assert status == 400 and reply["error"] == "parameter step must be a JSON integer, got 1.5", (route, reply)
    status, reply = api.get("/api/root", run=run, file=file, step="1.5", rank=0, side="NPU")
    assert status == 400 and reply["error"] == "parameter step must be an integer, got '1.5'"
    assert not [n for n in os.listdir(logdir / run) if n.endswith(".vis.config")]


def test_apply_leaves_no_wal_or_shm_beside_the_database(api, logdir):
    """A reader the plugin held open while apply wrote (it opens read-only with -wal beside the file, here one a
    closed live writer left) kept the -wal and -shm for good: no read-only connection can remove them."""
    import sqlite3

    run, file = db_file(logdir, "cmp_stat")
    db = logdir / run / file
    q = dict(run=run, file=file, step=0, rank=0)
    with open(db, "rb") as f:
        mode_before = f.read(20)[18:20]
    holder = sqlite3.connect(str(db))
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("UPDATE tb_config SET micro_steps = micro_steps")
    holder.commit()
    with open(f"{db}-wal", "rb") as f:
        left = f.read()
    holder.close()
    with open(f"{db}-wal", "wb") as f:
        f.write(left)
    assert api.get("/api/root", side="NPU", **q)[0] == 200        # (a pooled reader, opened with the -wal there)
    api.post("/api/match", dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward"))
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200, body
    assert api.get("/api/root", side="NPU", **q)[0] == 200
    names = sorted(os.listdir(logdir / run))
    assert not [n for n in names if n.endswith(("-wal", "-shm"))], names
    with open(db, "rb") as f:
        assert f.read(20)[18:20] == mode_before                   # (the journal mode the file had)


def test_json_bodies_and_query_flags_take_the_documented_types_only(api, logdir):
    """Integers are JSON integers, booleans JSON booleans in a body, and 0 or 1 in a query: `"step": "0"` was
    taken, `"descendants": "no"` meant true, `compact=yes` was taken where `regex=2` was refused, and a legend's
    `description: 5` / `accuracy_level: []` were stored as the text "5" / "[]"."""
    run, file = db_file(logdir, "cmp_stat")
    pair = dict(run=run, file=file, rank=0, debug=FC0, bench=FC0)
    status, reply = api.post("/api/match", dict(pair, step="0"))
    assert status == 400 and reply["error"] == 'parameter step must be a JSON integer, got "0"', reply
    status, reply = api.post("/api/match", dict(pair, step=0, rank=True))
    assert status == 400 and reply["error"] == "parameter rank must be a JSON integer, got true", reply
    for value in ("no", "yes", 1):
        status, reply = api.post("/api/match", dict(pair, step=0, descendants=value))
        assert status == 400 and reply["error"].startswith(
            "parameter descendants must be a JSON boolean (true or false), got "), (value, reply)
        status, _ = api.post("/api/unmatch", dict(run=run, file=file, step=0, rank=0, debug=FC0, descendants=value))
        assert status == 400
    assert not [n for n in os.listdir(logdir / run) if n.endswith((".vis.config", ".unmatch.json"))]
    assert api.post("/api/match", dict(pair, step=0, descendants=False))[0] == 200
    assert api.post("/api/match", dict(pair, step=0))[0] == 200                  # (absent: false)
    q = dict(run=run, file=file, step=0, rank=0, side="NPU")
    for route, extra in (("/api/children", dict(node="DefaultModel", compact="yes")),
                         ("/api/search", dict(q="a", regex="true")), ("/api/filter", dict(desc="no"))):
        status, reply = api.get(route, **q, **extra)
        name = next(iter(k for k in extra if k not in ("node", "q")))
        assert status == 400 and reply["error"] == f"parameter {name} must be 0 or 1, got {extra[name]!r}", reply
    assert api.get("/api/children", node="DefaultModel", compact=1, **q)[0] == 200
    assert api.get("/api/children", node="DefaultModel", compact=0, **q)[0] == 200
    for key, bad in (("description", 5), ("accuracy_level", [])):
        colors = _legend(**{"#C7C7C7": {"value": [], key: bad}})
        status, reply = api.post("/api/legend", dict(run=run, file=file, node_colors=colors))
        assert status == 400 and reply["error"] == f"colour #C7C7C7: {key} must be text, got {json.dumps(bad)}"
    assert not os.path.exists(logdir / run / (file + ".legend.json"))


def test_the_apply_locks_stay_bounded_one_file_keeping_its_lock(tmp_path):
    """One lock per path ever applied grew without bound in a long-lived TensorBoard; a file's applies still share
    one lock, whichever spelling of its path they come by."""
    import threading

    from tbprobe.tb_plugin import edits

    paths = [str(tmp_path / f"f{i}.vis.db") for i in range(2000)]
    locks = {id(edits._apply_lock(p)) for p in paths}
    assert len(locks) <= 64
    os.symlink(paths[0], tmp_path / "link.vis.db")
    one = edits._apply_lock(paths[0])
    assert edits._apply_lock(str(tmp_path / "." / "f0.vis.db")) is one
    assert edits._apply_lock(str(tmp_path / "link.vis.db")) is one
    assert isinstance(one, type(threading.Lock()))


def _side_file_locks() -> int:
    """The lock objects the side-file module and class keep (in dicts, tuples or lists, however they are held)."""
    import threading

    from tbprobe.tb_plugin import side_files

    lock_type = type(threading.Lock())
    seen = set()

    def walk(value, depth=0):
        if isinstance(value, lock_type):
            seen.add(id(value))
        elif depth < 3 and isinstance(value, dict):
            for v in list(value.values()):
                walk(v, depth + 1)
        elif depth < 3 and isinstance(value, (tuple, list)):
            for v in value:
                walk(v, depth + 1)

    for v in list(vars(side_files).values()) + list(vars(side_files.SideFiles).values()):
        walk(v)
    return len(seen)


def test_the_side_file_locks_stay_bounded_through_an_apply_of_many_steps_and_ranks(api, logdir):
    """An apply took one lock per step x rank side-file name, each kept for good: 1,000 steps x 64 ranks held 128k
    locks. The locks are a fixed stripe now, one per graph file's side files, shared by match, legend and apply."""
    import sqlite3

    from tbprobe.tb_plugin.side_files import SideFiles

    run, file = db_file(logdir, "cmp_stat")
    path = logdir / run / file
    conn = sqlite3.connect(str(path))
    with conn:
        conn.execute("UPDATE tb_config SET step_list = ?, rank_list = ?",
                     (json.dumps(list(range(100))), json.dumps(list(range(16)))))
    conn.close()
    q = dict(run=run, file=file, step=0, rank=0)
    assert api.post("/api/match", dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward"))[0] == 200
    assert api.post("/api/legend", dict(run=run, file=file, node_colors=_legend()))[0] == 200
    status, reply = api.post("/api/apply", dict(run=run, file=file))
    assert status == 200, reply
    assert reply["nodes_updated"] > 0
    assert _side_file_locks() <= 64   # (3,201 names: one lock each before)
    folder = str(logdir / run)
    one = SideFiles(folder, file).lock()
    tag = file[:-len(".vis.db")]
    assert SideFiles(folder + "/.", file).lock() is one
    assert SideFiles(folder, tag + ".vis").lock() is one   # (x.vis and x.vis.db share x_<step>_<rank>.vis.config)


def _fixed_stamp(monkeypatch, stamp: str = "20260101000000"):
    import types

    from tbprobe.tb_plugin import edits

    monkeypatch.setattr(edits, "time", types.SimpleNamespace(strftime=lambda fmt: stamp))
    return stamp


def _edited(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0)
    assert api.post("/api/match", dict(q, debug="Tensor.__mul__.1.forward", bench="Tensor.__add__.1.forward"))[0] == 200
    assert api.post("/api/legend", dict(run=run, file=file, node_colors=_legend()))[0] == 200
    return run, file, logdir / run


def test_apply_never_writes_through_a_planted_backup_link(api, logdir, tmp_path, monkeypatch):
    """The backup was `shutil.copy2(db, db + ".bak-<stamp>")` guarded by `os.path.exists`, which is False for a
    dangling link: a link planted under the next second's name had the copy create the file it pointed to, outside
    the log directory (a tester got 1.5 MB written there). Now the backup is created exclusively (O_EXCL |
    O_NOFOLLOW): a link holding the name is a 403, nothing is written anywhere, the edits stay pending."""
    stamp = _fixed_stamp(monkeypatch)
    run, file, folder = _edited(api, logdir)
    db = folder / file
    before = _digest(db)
    victim = tmp_path / "victim"
    os.symlink(victim, folder / f"{file}.bak-{stamp}")
    pending = sorted(os.listdir(folder))
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 403 and body["error"] == (f"apply refused: {file}.bak-{stamp} is a symbolic link (the apply "
                                               "writes that name itself); nothing was written"), body
    assert not os.path.lexists(victim)
    assert _digest(db) == before and sorted(os.listdir(folder)) == pending   # nothing written, no name reserved
    os.unlink(folder / f"{file}.bak-{stamp}")
    status, body = api.post("/api/apply", dict(run=run, file=file))        # the edits are still there to apply
    assert status == 200 and body["backup"] == f"{file}.bak-{stamp}", body


def test_apply_never_renames_a_side_file_over_a_planted_name(api, logdir, tmp_path, monkeypatch):
    """The side files an apply folds in are renamed `<side file>.bak-<stamp>`: a link or a file holding one of
    those names is refused before anything is written (the rename replaced it unseen); a regular file by the
    backup's name is a 409 (the name is taken), never overwritten."""
    stamp = _fixed_stamp(monkeypatch)
    run, file, folder = _edited(api, logdir)
    db = folder / file
    before = _digest(db)
    legend_bak = folder / f"{file}.legend.json.bak-{stamp}"
    os.symlink(tmp_path / "victim", legend_bak)
    pending = sorted(os.listdir(folder))
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 403 and f"{file}.legend.json.bak-{stamp} is a symbolic link" in body["error"], body
    assert not os.path.lexists(tmp_path / "victim") and os.path.islink(legend_bak)
    assert _digest(db) == before and sorted(os.listdir(folder)) == pending
    os.unlink(legend_bak)
    (folder / f"{file}.bak-{stamp}").write_bytes(b"someone's file")
    pending = sorted(os.listdir(folder))
    status, body = api.post("/api/apply", dict(run=run, file=file))
    assert status == 409 and f"{file}.bak-{stamp} exists already" in body["error"], body
    assert (folder / f"{file}.bak-{stamp}").read_bytes() == b"someone's file"
    assert _digest(db) == before and sorted(os.listdir(folder)) == pending


def test_apply_refuses_a_linked_sqlite_journal_before_any_backup(api, logdir, tmp_path, monkeypatch):
    stamp = _fixed_stamp(monkeypatch)
    run, file, folder = _edited(api, logdir)
    for suffix in ("-journal", "-wal"):
        os.symlink(tmp_path / f"victim{suffix}", folder / f"{file}{suffix}")
        status, body = api.post("/api/apply", dict(run=run, file=file))
        assert status == 403 and body["error"] == (f"apply refused: {file}{suffix} is a symbolic link; nothing was "
                                                   "written"), body
        assert not os.path.lexists(folder / f"{file}.bak-{stamp}") and not os.path.lexists(tmp_path / f"victim{suffix}")
        os.unlink(folder / f"{file}{suffix}")


def test_side_file_writes_refuse_a_link_or_folder_by_their_name(api, logdir, tmp_path):
    """A legend edit renamed its temporary file over whatever held `<file>.legend.json`: a link was replaced
    silently (reads of it are refused) and a folder made a 500. Both are refused with a 403."""
    run, file = db_file(logdir, "cmp_stat")
    target = logdir / run / f"{file}.legend.json"
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    os.symlink(outside, target)
    status, body = api.post("/api/legend", dict(run=run, file=file, node_colors=_legend()))
    assert status == 403 and body["error"] == f"side file {file}.legend.json is a symbolic link: refused", body
    assert os.path.islink(target) and outside.read_text() == "{}"
    os.unlink(target)
    os.mkdir(target)
    status, body = api.post("/api/legend", dict(run=run, file=file, node_colors=_legend()))
    assert status == 403 and body["error"] == f"side file {file}.legend.json is not a regular file: refused", body
    assert not [n for n in os.listdir(logdir / run) if n.startswith(".tbprobe-")]   # no temporary file left
