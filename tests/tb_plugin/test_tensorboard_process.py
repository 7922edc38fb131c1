"""The plugin inside a real ``tensorboard`` process, under ``--path_prefix``: the entry point loads, routes
answer relative to the prefix, writes check the origin against the real host."""
import json
import os
import shutil
import urllib.error
import urllib.request

import pytest

from tests.tb_plugin.conftest import FIXTURES
from tests.tb_plugin.tb_server import TensorBoardServer

pytestmark = pytest.mark.slow


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def _post(url: str, body: dict, origin: str, host: str = None):
    headers = {"Content-Type": "application/json", "Origin": origin}
    if host:
        headers["Host"] = host
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def test_plugin_under_path_prefix(tmp_path):
    case = "cmp_stat"
    os.makedirs(tmp_path / "logs" / "a" / "b")
    name = os.listdir(os.path.join(FIXTURES, case))[0]
    shutil.copy(os.path.join(FIXTURES, case, name), tmp_path / "logs" / "a" / "b" / name)
    with TensorBoardServer(tmp_path / "logs", path_prefix="/tb/x") as tb:
        status, _, body = _get(tb.url + "/data/plugins_listing")
        listing = json.loads(body)
        assert status == 200 and listing["graph_ascend"]["enabled"] is True
        assert listing["graph_ascend"]["tab_name"] == "GRAPH_ASCEND"
        mechanism = listing["graph_ascend"]["loading_mechanism"]
        assert mechanism == {"type": "IFRAME", "module_path": "/tb/x/data/plugin/graph_ascend/index.js"}
        base = tb.url + "/data/plugin/graph_ascend"
        status, headers, js = _get(base + "/index.js")
        assert status == 200 and "javascript" in headers["Content-Type"] and b"render" in js
        status, _, body = _get(base + "/api/runs")
        assert status == 200 and json.loads(body)["runs"][0]["run"] == "a/b"
        status, _, body = _get(base + f"/api/children?run=a/b&file={name}&step=0&rank=0&side=NPU&node=DefaultModel")
        assert status == 200 and json.loads(body)["total"] == 9
        status, _, body = _get(base + f"/api/node?run=a/b&file={name}&step=0&rank=0&side=NPU&node=missing")
        assert status == 404
        status, _, _ = _get(base + "/api/meta?run=../../..&file=x.vis.db")
        assert status == 403
        match = dict(run="a/b", file=name, step=0, rank=0, debug="Tensor.__mul__.1.forward",
                     bench="Tensor.__add__.1.forward")
        assert _post(base + "/api/match", match, origin="http://evil.example")[0] == 403
        # DNS rebinding: a page of evil.example resolved to 127.0.0.1 is same-origin with itself; the Host it
        # sends is no name of this server (TensorBoard was started with --host 127.0.0.1)
        evil = f"evil.example:{tb.port}"
        status, body = _post(base + "/api/match", match, origin=f"http://{evil}", host=evil)
        assert status == 403 and "not a name of this server" in body["error"], body
        status, body = _post(base + "/api/match", match, origin=f"http://127.0.0.1:{tb.port}")
        assert status == 200, body
        assert os.path.exists(tmp_path / "logs" / "a" / "b" / body["file"])
        _, _, outside = _get(f"http://127.0.0.1:{tb.port}/data/plugin/graph_ascend/api/runs")
        # without the prefix the route does not exist
        assert b"runs" not in outside or b"a/b" not in outside
