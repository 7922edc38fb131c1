"""Interop with the reference plugin: tb-graph-ascend, run as a real `tensorboard --logdir` process, serves a
database re-written by tbprobe's VisDbWriter exactly as it serves msprobe's original (config, node list, node
details compared response for response)."""
import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

from tbprobe.formats.vis_db import NODE_COLUMNS, VisDbReader, VisDbWriter
from tests.tb_plugin.tb_server import TensorBoardServer

from .conftest import REF

TENSORBOARD = Path(os.environ.get("PEERS_DIR", "/tmp/peers")) / "tbga" / "bin" / "tensorboard"


def _get(url: str, body=None) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


@pytest.mark.peers
@pytest.mark.slow
def test_reference_plugin_serves_a_tbprobe_written_db_like_its_own(tmp_path):
    if not TENSORBOARD.exists():
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")
    logdir = tmp_path / "logs"
    (logdir / "ref").mkdir(parents=True)
    (logdir / "ours").mkdir()
    shutil.copy(next(REF.glob("outputs/cmp_stat/*.vis.db")), logdir / "ref" / "cmp.vis.db")
    with VisDbReader(logdir / "ref" / "cmp.vis.db") as r, VisDbWriter(logdir / "ours" / "cmp.vis.db") as w:
        w.add_nodes(r.conn.execute(f"SELECT {', '.join(NODE_COLUMNS)} FROM tb_nodes"))
        w.add_stacks(r.conn.execute("SELECT id, stack_info FROM tb_stack"))
        w.set_config_row(r.config_row())

    with TensorBoardServer(logdir, binary=str(TENSORBOARD), timeout=120, cwd=str(tmp_path)) as tb:
        base = tb.url + "/data/plugin/graph_ascend"
        runs = json.loads(_get(f"{base}/load_meta_dir"))
        assert runs["data"] == {"ours": {"type": "db", "tags": ["cmp"]}, "ref": {"type": "db", "tags": ["cmp"]}}
        answers = {}
        for run in ("ref", "ours"):
            _get(f"{base}/loadGraphData?run={run}&tag=cmp&type=db")
            meta = {"run": run, "tag": "cmp", "type": "db", "rank": 0, "step": 0, "microStep": -1, "lang": "en"}
            answers[run] = [
                json.loads(_get(f"{base}/loadGraphConfigInfo", {"metaData": meta})),
                json.loads(_get(f"{base}/loadGraphAllNodeList", {"metaData": meta})),
                json.loads(_get(f"{base}/getNodeInfo", {"metaData": meta, "nodeInfo": {
                    "nodeName": "Module.layers.1.fc.Linear.forward.0", "nodeType": "NPU"}})),
            ]
        assert all(a["success"] for a in answers["ours"]), answers["ours"]
        node = answers["ours"][2]["data"]["npu"]
        assert node["node_name"] == "Module.layers.1.fc.Linear.forward.0" and node["output_data"]
        assert len(answers["ours"][1]["data"]["npuMatchNodes"]) > 10
        assert answers["ours"] == answers["ref"]
