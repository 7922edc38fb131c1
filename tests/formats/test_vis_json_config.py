"""Legacy .vis JSON graphs and the side files (.vis.config manual matches, .legend.json colour legends)."""
import json
import os

import pytest

from tbprobe.formats.vis_config import (
    legend_path,
    load_legend,
    load_matches,
    match_config_name,
    save_legend,
    save_matches,
)
from tbprobe.formats.vis_db import VisDbReader
from tbprobe.formats.vis_json import load_vis_json

from .conftest import OWN


def vis_from_db(reader: VisDbReader, step: int, rank: int) -> dict:
    """A legacy .vis document built from one step/rank of a database (REFERENCE.md s2 field names)."""
    cfg = reader.config()
    doc = {"ToolTip": json.dumps(cfg["tool_tip"]), "Colors": cfg["node_colors"], "MicroSteps": cfg["micro_steps"],
           "task": cfg["task"], "OverflowCheck": bool(cfg["overflow_check"])}
    for side in ("NPU", "Bench"):
        nodes = list(reader.nodes(step, rank, side, parse_json=True))
        if not nodes:
            continue
        doc[side] = {"root": nodes[-1]["node_name"], "dump_data_dir": nodes[-1]["dump_data_dir"], "node": {
            n["node_name"]: {"id": n["node_name"], "node_type": int(n["node_type"]), "upnode": n["up_node"],
                             "subnodes": n["sub_nodes"], "matched_node_link": n["matched_node_link"],
                             "input_data": n["input_data"], "output_data": n["output_data"],
                             "stack_info": reader.stack(n["stack_id"]) or [], "micro_step_id": n["micro_step_id"],
                             "data": {"precision_index": n["precision_index"], "overflow_level": n["overflow_level"]}}
            for n in nodes}}
    return doc


def test_vis_built_from_a_reference_db(ref_db_copies, tmp_path):
    with VisDbReader(ref_db_copies["cmp_stat"]) as r:
        doc = vis_from_db(r, 0, 0)
    path = tmp_path / "compare.vis"
    path.write_text(json.dumps(doc))
    vis = load_vis_json(path)
    assert len(vis["NPU"]["node"]) == 48 and len(vis["Bench"]["node"]) == 44
    assert vis["NPU"]["root"] == "DefaultModel"
    exp = vis["NPU"]["node"]["Torch.exp.0.forward"]
    assert exp["data"]["overflow_level"] == "critical" and exp["upnode"] == "Module.layers.1.Block.forward.0"
    assert vis["task"] == "summary" and vis["OverflowCheck"] is True


def test_hand_written_sample_vis():
    vis = load_vis_json(OWN / "sample.vis")
    assert vis["NPU"]["node"]["Functional.linear.0.forward"]["data"] == {"precision_index": 1,
                                                                         "overflow_level": "critical"}
    assert vis["Bench"]["node"]["DefaultModel"]["subnodes"] == ["Module.fc1.Linear.forward.0"]
    assert vis["MicroSteps"] == 1


def test_vis_root_must_be_a_node(tmp_path):
    p = tmp_path / "x.vis"
    p.write_text(json.dumps({"NPU": {"root": "Missing", "node": {}}}))
    from tbprobe.errors import FormatError

    with pytest.raises(FormatError, match='"NPU".root "Missing" is not one of its nodes'):
        load_vis_json(p)


def test_matches_round_trip_and_atomic(tmp_path, monkeypatch):
    name = match_config_name("compare_20261130", 0, 1)
    assert name == "compare_20261130_0_1.vis.config"
    path = tmp_path / name
    assert load_matches(path) == {}
    matches = {"Module.layers.1.Block.forward.0": "Module.layers.1.Block.forward.0", "Torch.exp.0.forward": "Ténsor"}
    save_matches(path, matches)
    assert load_matches(path) == matches
    # a failing write keeps the previous file whole and leaves no temporary file
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        save_matches(path, {"a": "b"})
    assert load_matches(path) == matches
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_legend_round_trip(tmp_path):
    db = tmp_path / "build_1.vis.db"
    lp = legend_path(db)
    assert lp.name == "build_1.vis.db.legend.json"
    assert load_legend(lp) == {}
    legend = {"#FF704D": {"value": [0.5, 1], "description": "my error band"}}
    save_legend(lp, legend)
    assert load_legend(lp) == legend
