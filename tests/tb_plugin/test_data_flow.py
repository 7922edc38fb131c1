"""The node panel's data flow: which records made a node's inputs and which ones its outputs fed, from a real
collector run built by `tbprobe graph` (the collector's dataflow.json becomes tbprobe_edges)."""
import os

import pytest

from tests.tb_plugin.conftest import make_api
from tests.tb_plugin.dump_cases import collected_graph

torch = pytest.importorskip("torch")


def test_node_details_give_producers_and_consumers(tmp_path):
    name = collected_graph(tmp_path / "run")
    api = make_api(tmp_path)
    q = dict(run="run", file=name, step=0, rank=0, side="NPU")
    status, relu = api.get("/api/node", node="Torch.relu.0.forward", **q)
    assert status == 200
    assert relu["data_flow"]["fed_by"] == [{"slot": "0", "node": "Functional.linear.0.forward"}]
    assert relu["data_flow"]["feeds"] == [{"slot": "0", "node": "Functional.linear.1.forward"}]
    _, first = api.get("/api/node", node="Functional.linear.0.forward", **q)
    assert first["data_flow"]["fed_by"] == []          # its input came from outside the recorded calls
    assert sorted((f["node"], f["slot"]) for f in first["data_flow"]["feeds"]) == [
        ("Tensor.__add__.0.forward", "1"), ("Torch.relu.0.forward", "0")]
    assert first["data_flow"]["feeds_truncated"] is False


def test_files_without_data_flow_say_none(tmp_path):
    import shutil

    from tests.tb_plugin.conftest import FIXTURES

    os.makedirs(tmp_path / "ref")
    src = os.path.join(FIXTURES, "build")
    name = next(n for n in os.listdir(src) if n.endswith(".vis.db"))
    shutil.copy(os.path.join(src, name), tmp_path / "ref" / name)
    api = make_api(tmp_path)
    status, node = api.get("/api/node", run="ref", file=name, step=0, rank=0, side="NPU", node="DefaultModel")
    assert status == 200 and node["data_flow"] is None
