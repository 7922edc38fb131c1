"""Shared fixtures of the plugin route tests: a log directory holding copies of the reference outputs, and a
werkzeug test client over TensorBoard's own WSGI application with the plugin loaded."""
import json
import os
import shutil
import sqlite3
from typing import Any, Dict, Tuple

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tbprobe.tb_plugin.graph_ascend_plugin import GraphAscendPlugin

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "msprobe-26.2.0", "outputs")
PREFIX = "/data/plugin/graph_ascend"
ORIGIN = "http://localhost"  # werkzeug's test client serves http://localhost


def fixture_dbs():
    """(case, file name) of every reference-built database."""
    out = []
    for case in sorted(os.listdir(FIXTURES)):
        folder = os.path.join(FIXTURES, case)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".vis.db"):
                out.append((case, name))
    return out


class Api:
    def __init__(self, client: Client):
        self.client = client

    def get(self, route: str, **params) -> Tuple[int, Any]:
        resp = self.client.get(PREFIX + route, query_string=params)
        body = resp.get_json(silent=True) if resp.mimetype == "application/json" else resp.data
        return resp.status_code, body

    def post(self, route: str, body: Any, origin: str = ORIGIN, content_type: str = "application/json",
             headers: Dict[str, str] = None) -> Tuple[int, Any]:
        hdrs = dict(headers or {})
        if origin is not None:
            hdrs["Origin"] = origin
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        resp = self.client.post(PREFIX + route, data=data, content_type=content_type, headers=hdrs)
        return resp.status_code, resp.get_json(silent=True)


def make_api(logdir: str) -> Api:
    plugin = GraphAscendPlugin(base_plugin.TBContext(logdir=str(logdir)))
    return Api(Client(application.TensorBoardWSGI([plugin])))


@pytest.fixture(autouse=True)
def private_index_cache(tmp_path_factory, monkeypatch):
    """Each test run gets its own on-disk index cache (never the user's)."""
    monkeypatch.setenv("TBPROBE_PLUGIN_CACHE", str(tmp_path_factory.getbasetemp() / "index-cache"))


@pytest.fixture
def logdir(tmp_path):
    root = tmp_path / "logs"
    for case, name in fixture_dbs():
        os.makedirs(root / "out" / case, exist_ok=True)
        shutil.copy(os.path.join(FIXTURES, case, name), root / "out" / case / name)
    return root


@pytest.fixture
def api(logdir):
    return make_api(logdir)


def db_file(logdir, case: str) -> Tuple[str, str]:
    """(run, file) of a fixture case inside the test log directory."""
    names = [n for n in os.listdir(os.path.join(logdir, "out", case)) if n.endswith(".vis.db")]
    return f"out/{case}", names[0]


def sql(path, query: str, args=()):
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


INPUTS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "msprobe-26.2.0", "inputs")


def build_tbprobe_db(out_dir, debug: str = "npu_stat", bench: str = "bench_stat") -> str:
    """Run ``tbprobe graph`` on the reference dumps; the path of the database it wrote."""
    import subprocess
    import sys
    os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "tbprobe", "graph", "-tp", os.path.join(INPUTS, debug),
                           "-gp", os.path.join(INPUTS, bench), "-o", str(out_dir), "-oc", "--serial", "-q"],
                          capture_output=True, text=True, timeout=300)
    dbs = [n for n in os.listdir(out_dir) if n.endswith(".vis.db")]
    if proc.returncode != 0 or not dbs:
        pytest.fail(f"tbprobe graph failed: {proc.stderr.strip()[-500:]}")
    return os.path.join(str(out_dir), dbs[0])


@pytest.fixture(scope="session")
def tbprobe_db(tmp_path_factory):
    return build_tbprobe_db(tmp_path_factory.mktemp("tbprobe_built"))
