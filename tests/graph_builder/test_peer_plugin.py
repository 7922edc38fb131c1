"""tbprobe's .vis.db opens in the reference plugin (tb-graph-ascend 8.3.2): a real `tensorboard --logdir`
process of the peer install loads the file, expands the root on both sides and returns node details."""
import json
import os
import urllib.request
from pathlib import Path

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden
from tests.tb_plugin.tb_server import TensorBoardServer

PEERS = Path(os.environ.get("PEERS_DIR", "/tmp/peers"))
TB = PEERS / "tbga" / "bin" / "tensorboard"
PREFIX = "/data/plugin/graph_ascend"

pytestmark = pytest.mark.peers


def _get(base, path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read().decode())


def _post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read().decode())


@pytest.fixture()
def peer_server(tmp_path):
    if not TB.exists():
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")
    logdir = tmp_path / "logs"
    result = run_graph(str(golden.INPUTS / "npu_stat"), str(golden.INPUTS / "bench_stat"), str(logdir / "run1"),
                       overflow_check=True, parallel=False, progress=False)
    with TensorBoardServer(logdir, binary=str(TB), timeout=60) as tb:
        base = tb.url + PREFIX
        _get(base, "/load_meta_dir")
        yield base, result.path


def test_reference_plugin_reads_tbprobe_db(peer_server):
    base, path = peer_server
    run, tag = path.parent.name, path.name[: -len(".vis.db")]
    meta = _get(base, "/load_meta_dir")
    assert meta["data"][run] == {"type": "db", "tags": [tag]}, meta
    with urllib.request.urlopen(f"{base}/loadGraphData?run={run}&tag={tag}&type=db", timeout=30) as r:
        assert r.status == 200 and b"success" in r.read()
    meta_data = {"run": run, "tag": tag, "type": "db", "lang": "en", "microStep": -1, "rank": 0, "step": 0}
    config = _post(base, "/loadGraphConfigInfo", {"metaData": meta_data})
    assert config.get("success") is True, config
    assert config["data"]["microSteps"] == 1 and config["data"]["overflowCheck"] is True
    for side in ("NPU", "Bench"):
        for name in ("DefaultModel", "Module.layers.1.Block.forward.0"):
            expanded = _post(base, "/changeNodeExpandState",
                             {"nodeInfo": {"nodeName": name, "nodeType": side}, "metaData": meta_data})
            assert expanded.get("success") is True, expanded
    info = _post(base, "/getNodeInfo", {"nodeInfo": {"nodeName": "Module.layers.1.fc.Linear.forward.0",
                                                     "nodeType": "NPU"}, "metaData": meta_data})
    assert info.get("success") is True, info
    assert info["data"]["npu"]["node_name"] == "Module.layers.1.fc.Linear.forward.0"
    assert info["data"]["bench"]["node_name"] == "Module.layers.1.fc.Linear.forward.0"
    assert "NormRelativeErr" in json.dumps(info["data"]["npu"])
