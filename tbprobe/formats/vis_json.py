"""Legacy `.vis` graph files: one JSON document per graph (REFERENCE.md section 2), written by older msprobe.

    {"NPU": {"root": name, "dump_data_dir": ..., "node": {name: node}}, "Bench": {...} (compare only),
     "ToolTip": ..., "Colors": ..., "MicroSteps": int, "task": str, "OverflowCheck": bool}
A node: {id, node_type, upnode, subnodes, matched_node_link, input_data, output_data, stack_info, micro_step_id,
data: {precision_index, overflow_level}}. Reading checks the shape; the document is returned as parsed.
"""
from pathlib import Path
from typing import Any, Dict, Union

from tbprobe.errors import FormatError
from tbprobe.formats._io import read_json

__all__ = ["load_vis_json", "SIDES"]

SIDES = ("NPU", "Bench")


def load_vis_json(path: Union[str, Path]) -> Dict[str, Any]:
    p = Path(path)
    doc = read_json(p, ".vis graph file")
    if not isinstance(doc, dict):
        raise FormatError(p, f"a .vis file must be a JSON object, found {type(doc).__name__}")
    if "NPU" not in doc:
        raise FormatError(p, 'not a .vis graph file: no "NPU" graph')
    for side in SIDES:
        if side not in doc:
            continue
        graph = doc[side]
        if not isinstance(graph, dict) or not isinstance(graph.get("node"), dict):
            raise FormatError(p, f'"{side}" must be an object with a "node" object')
        root = graph.get("root")
        if root is not None and root not in graph["node"]:
            raise FormatError(p, f'"{side}".root "{root}" is not one of its nodes')
        for name, node in graph["node"].items():
            if not isinstance(node, dict):
                raise FormatError(p, f'"{side}" node "{name}" must be an object')
            subnodes = node.get("subnodes", [])
            if not isinstance(subnodes, list):
                raise FormatError(p, f'"{side}" node "{name}": subnodes must be a list')
    return doc
