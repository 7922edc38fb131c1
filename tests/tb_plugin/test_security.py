"""Paths stay inside the log directory; writes need our own origin, JSON and a small body; static files too."""
import os

import pytest

from tests.tb_plugin.conftest import PREFIX, db_file


@pytest.mark.parametrize("run,file", [
    ("../..", "etc"), ("..", "passwd.vis.db"), ("out/../..", "x.vis.db"), ("/etc", "passwd.vis.db"),
    ("out", "../../etc/passwd"), ("out", "/etc/passwd"), (".", "../secret.vis.db"), ("out/..\\..", "a.vis.db"),
])
def test_traversal_is_refused_with_403(api, run, file):
    status, body = api.get("/api/meta", run=run, file=file)
    assert status == 403, body
    assert "refused" in body["error"]


def test_encoded_traversal_is_refused(api):
    resp = api.client.get(PREFIX + "/api/meta?run=%2e%2e%2f%2e%2e&file=%2e%2e%2fetc%2fpasswd")
    assert resp.status_code == 403
    resp = api.client.get(PREFIX + "/api/meta?run=out&file=..%2F..%2Fetc%2Fpasswd")
    assert resp.status_code == 403
    resp = api.client.get(PREFIX + "/api/meta?run=out%00&file=a.vis.db")
    assert resp.status_code == 403


def test_symlinks_leading_outside_are_refused(api, logdir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    src = logdir / "out" / "build"
    name = os.listdir(src)[0]
    (outside / name).write_bytes((src / name).read_bytes())
    os.symlink(outside, logdir / "linkdir")
    os.symlink(outside / name, logdir / "out" / "linked.vis.db")
    assert api.get("/api/meta", run="linkdir", file=name)[0] == 403
    assert api.get("/api/meta", run="out", file="linked.vis.db")[0] == 403
    _, runs = api.get("/api/runs")  # never listed either
    listed = {(r["run"], f["file"]) for r in runs["runs"] for f in r["files"]}
    assert ("linkdir", name) not in listed and ("out", "linked.vis.db") not in listed
    # a link that stays inside is fine
    os.symlink(src / name, logdir / "out" / "inside.vis.db")
    assert api.get("/api/meta", run="out", file="inside.vis.db")[0] == 200


def test_missing_and_unknown(api, logdir):
    assert api.get("/api/meta", file="x.vis.db")[0] == 400
    assert api.get("/api/meta", run="out/build")[0] == 400
    assert api.get("/api/meta", run="out/nothing", file="x.vis.db")[0] == 404
    assert api.get("/api/meta", run="out/build", file="notes.txt")[0] == 400


@pytest.mark.parametrize("params,needle", [
    (dict(step="abc"), "step"), (dict(rank="1.5"), "rank"), (dict(side="CPU"), "side"),
    (dict(limit="0"), "limit"), (dict(limit="999999999"), "limit"), (dict(offset="-1"), "offset"),
    (dict(micro_step="x"), "micro_step"),
])
def test_bad_parameters_are_400_naming_the_parameter(api, logdir, params, needle):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    q.update(params)
    status, body = api.get("/api/children", **q)
    assert status == 400 and needle in body["error"]


def test_every_api_answer_says_its_server_time(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    for query in ("/api/runs", f"/api/meta?run={run}&file={file}", "/api/meta?run=..&file=x.vis.db"):
        resp = api.client.get("/data/plugin/graph_ascend" + query)
        assert float(resp.headers["Server-Timing"].split("dur=")[1]) >= 0


def test_unknown_node_is_404_on_every_node_route(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="No.such.node.0")
    for route in ("/api/children", "/api/node"):
        status, body = api.get(route, **q)
        assert status == 404 and "No.such.node.0" in body["error"]


def _match_body(logdir):
    run, file = db_file(logdir, "cmp_stat")
    return dict(run=run, file=file, step=0, rank=0, debug="Tensor.__mul__.1.forward",
                bench="Tensor.__add__.1.forward", descendants=False)


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost:8080", "https://localhost"])
def test_cross_origin_post_is_refused(api, logdir, origin):
    status, body = api.post("/api/match", _match_body(logdir), origin=origin)
    assert status == 403 and "cross-origin" in body["error"]
    assert not [n for n in os.listdir(logdir / "out" / "cmp_stat") if n.endswith(".vis.config")]


def test_post_without_origin_needs_same_origin_fetch_metadata(api, logdir):
    status, _ = api.post("/api/match", _match_body(logdir), origin=None)
    assert status == 403
    status, _ = api.post("/api/match", _match_body(logdir), origin=None, headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403
    status, _ = api.post("/api/match", _match_body(logdir), origin=None, headers={"Sec-Fetch-Site": "same-origin"})
    assert status == 200


def test_post_content_type_size_and_json_checks(api, logdir):
    body = _match_body(logdir)
    assert api.post("/api/match", body, content_type="text/plain")[0] == 415
    assert api.post("/api/match", body, content_type="application/x-www-form-urlencoded")[0] == 415
    big = dict(body, pad="x" * (1 << 20))
    assert api.post("/api/match", big)[0] == 413
    assert api.post("/api/match", b"{not json")[0] == 400
    assert api.post("/api/match", b"[1, 2]")[0] == 400
    status, answer = api.post("/api/match", b"[" * 100000 + b"]" * 100000)    # under the size limit (a 500)
    assert status == 400 and "nested too deeply" in answer["error"]
    assert api.post("/api/match", dict(body, step="x"))[0] == 400
    assert api.client.get(PREFIX + "/api/match").status_code == 405


@pytest.mark.parametrize("column,value", [("rank_list", '["a"]'), ("step_list", "[null]"), ("micro_steps", "'x'")])
def test_a_hostile_tb_config_is_400_naming_the_column(api, logdir, column, value):
    """tb_config's lists were read with int(): a file holding '["a"]' answered 500 on every route."""
    import sqlite3

    run, file = db_file(logdir, "cmp_stat")
    conn = sqlite3.connect(str(logdir / run / file))
    conn.execute(f"UPDATE tb_config SET {column} = {value if column == 'micro_steps' else repr(value)}")
    conn.commit()
    conn.close()
    for route in ("/api/meta", "/api/root"):
        status, body = api.get(route, run=run, file=file, step=0, rank=0, side="NPU")
        assert status == 400 and column in body["error"], (route, status, body)


def test_traversal_in_a_post_body_is_refused(api, logdir):
    body = dict(_match_body(logdir), run="../..")
    assert api.post("/api/match", body)[0] == 403
    assert api.post("/api/apply", {"run": "out", "file": "../../x.vis.db"})[0] == 403


def test_static_files(api):
    resp = api.client.get(PREFIX + "/index.js")
    assert resp.status_code == 200 and "javascript" in resp.content_type
    assert b"render" in resp.data
    for bad in ("/static/../graph_ascend_plugin.py", "/static/%2e%2e/graph_ascend_plugin.py",
                "/static/..%2Fgraph_ascend_plugin.py"):
        assert api.client.get(PREFIX + bad).status_code in (403, 404)
    assert api.client.get(PREFIX + "/static/no-such-file.js").status_code == 404


def test_a_static_path_refused_names_the_static_folder_not_the_log_directory(api):
    """`curl --path-as-is .../static/../index.js` was told the path "leaves the log directory": the static
    route's root is the plugin's bundle folder."""
    for bad in ("/static/../index.js", "/static/%2e%2e/index.js"):
        resp = api.client.get(PREFIX + bad)
        assert resp.status_code == 403, (bad, resp.status_code)
        assert resp.get_json()["error"] == "path refused: '../index.js' leaves the plugin's static folder", bad


def test_a_fifo_named_like_a_graph_is_listed_as_not_a_regular_file_and_never_opened(api, logdir):
    """A FIFO named x.vis.db was listed with "expected a .vis.db file, found a folder"; a read of it said "no such
    graph file". Opening it would block the request: it is never opened."""
    os.mkfifo(logdir / "out" / "pipe.vis.db")
    _, runs = api.get("/api/runs")
    item, = [f for r in runs["runs"] if r["run"] == "out" for f in r["files"] if f["file"] == "pipe.vis.db"]
    assert item["error"] == "pipe.vis.db: not a regular file (a FIFO, a device or a socket)", item
    status, body = api.get("/api/meta", run="out", file="pipe.vis.db")
    assert (status, body["error"]) == (400, "pipe.vis.db: not a regular file (a FIFO, a device or a socket)")
    os.mkdir(logdir / "out" / "dir.vis.db")
    status, body = api.get("/api/meta", run="out", file="dir.vis.db")
    assert (status, body["error"]) == (400, "dir.vis.db: not a regular file (a folder)")


@pytest.mark.parametrize("value", [" 0", "0 ", "\u0660", "\u00b2", "0_0", "+1", "1e3", "0x1", "１"])
def test_an_integer_parameter_takes_ascii_digits_only(api, logdir, value):
    """int() read " 0", "0_0" and "٠" (Arabic-Indic zero) as 0: a step or rank written in another script, or
    with spaces, was accepted as another number than the one written."""
    run, file = db_file(logdir, "cmp_stat")
    status, body = api.get("/api/root", run=run, file=file, step=value, rank=0, side="NPU")
    assert (status, body["error"]) == (400, f"parameter step must be an integer, got '{value}'")


def test_integer_parameters_take_a_minus_where_their_range_has_room(api, logdir):
    run, file = db_file(logdir, "cmp_stat")
    q = dict(run=run, file=file, step=0, rank=0, side="NPU", node="DefaultModel")
    assert api.get("/api/children", **q, micro_step="-1")[0] == 200
    status, body = api.get("/api/children", **q, offset="-1")
    assert (status, body["error"]) == (400, "parameter offset must be between 0 and 2147483647")
    status, body = api.get("/api/children", **q, offset="9" * 5000)    # (int() refuses 4300 digits: a 500)
    assert (status, body["error"]) == (400, "parameter offset must be between 0 and 2147483647")


def test_a_refused_path_is_quoted_as_written_not_as_its_repr(api):
    """repr() doubled each backslash: a run `out\\..` (one backslash) was refused as 'out\\\\..'."""
    status, body = api.get("/api/meta", run="out\\..", file="x.vis.db")
    assert (status, body["error"]) == (403, "path refused: 'out\\..' leaves the log directory")
    status, body = api.get("/api/meta", run="C:\\x", file="x.vis.db")
    assert (status, body["error"]) == (403, "path refused: 'C:\\x' is absolute")
    status, body = api.get("/api/meta", run="out", file="a\\b.txt")
    assert status == 403
    status, body = api.get("/api/meta", run="out/cmp_stat", file="a\u0007b.txt")   # (what would not show is escaped)
    assert (status, body["error"]) == (400, "not a graph file: 'a\\x07b.txt' (expected .vis.db or .vis)")


def _host_api(logdir, monkeypatch, allowed=None, **flags):
    import argparse

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tbprobe.tb_plugin.graph_ascend_plugin import GraphAscendPlugin
    from tests.tb_plugin.conftest import Api

    if allowed is None:
        monkeypatch.delenv("TBPROBE_ALLOWED_HOSTS", raising=False)
    else:
        monkeypatch.setenv("TBPROBE_ALLOWED_HOSTS", allowed)
    ns = argparse.Namespace(**{"host": None, "bind_all": False, **flags}) if flags else None
    plugin = GraphAscendPlugin(base_plugin.TBContext(logdir=str(logdir), flags=ns))
    return Api(Client(application.TensorBoardWSGI([plugin])))


def _write_as(api, logdir, host):
    return api.post("/api/match", _match_body(logdir), origin=f"http://{host}", headers={"Host": host})


def test_a_write_under_a_name_that_is_not_this_servers_is_refused_dns_rebinding(logdir, monkeypatch):
    """The Origin check compared Origin with the request's own Host: a page of evil.example re-resolved to this
    machine (DNS rebinding) sent Host: evil.example:7341 and Origin: http://evil.example:7341, and was accepted."""
    monkeypatch.setattr("socket.gethostname", lambda: "buildbox")
    monkeypatch.setattr("socket.getfqdn", lambda: "buildbox.lab.example")
    api = _host_api(logdir, monkeypatch)
    status, body = _write_as(api, logdir, "evil.example:7341")
    assert (status, body["error"]) == (403, "write refused: 'evil.example' is not a name of this server (a guard "
                                            "against DNS rebinding; writes answer to localhost, IP addresses, --host "
                                            "and this machine's names): to allow it, start TensorBoard with "
                                            "TBPROBE_ALLOWED_HOSTS=evil.example")
    assert not [n for n in os.listdir(logdir / "out" / "cmp_stat") if n.endswith(".vis.config")]
    assert _write_as(api, logdir, "bad host")[0] == 403
    # reads are not checked (TensorBoard's own are not either)
    assert api.client.get(PREFIX + "/api/runs", headers={"Host": "evil.example:7341"}).status_code == 200
    for host in ("localhost:7341", "LOCALHOST.:7341", "tb.localhost:7341", "127.0.0.1:7341", "[::1]:7341",
                 "10.1.2.3:6006", "buildbox:6006", "buildbox.lab.example:6006"):
        status, body = _write_as(api, logdir, host)
        assert status == 200, (host, body)


def test_writes_answer_to_the_host_tensorboard_was_started_with_and_to_configured_names(logdir, monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "buildbox")
    monkeypatch.setattr("socket.getfqdn", lambda: "buildbox")
    api = _host_api(logdir, monkeypatch, host="gpu-box.corp")
    assert _write_as(api, logdir, "gpu-box.corp:6006")[0] == 200
    assert _write_as(api, logdir, "tb.corp:6006")[0] == 403
    # --bind_all (or --host 0.0.0.0): reached by an IP address or the machine's name; another name is configured
    api = _host_api(logdir, monkeypatch, allowed="tb.corp, .proxy.example", host="0.0.0.0")
    for host in ("192.168.1.7:6006", "buildbox:6006", "tb.corp:6006", "a.proxy.example"):
        assert _write_as(api, logdir, host)[0] == 200, host
    assert _write_as(api, logdir, "proxy.example.evil:6006")[0] == 403
    api = _host_api(logdir, monkeypatch, allowed="*", bind_all=True)
    assert _write_as(api, logdir, "anything.example:6006")[0] == 200
