"""The node panel's data: a stored node turned into inputs / outputs / parameters with typed values.

Stored values are all strings (``"0.125"``, ``"14.2%"``, ``"[3, 8]"``); numbers become JSON numbers so the page
can sort them numerically, everything else stays as written. NaN and infinities stay strings (JSON has no
literal for them).
"""
import math
from typing import Dict, List, Optional, Tuple

from tbprobe.tb_plugin.graph_index import stored_int
from tbprobe.tb_plugin.request_params import INT32

__all__ = ["typed_value", "split_params", "detail"]

_TEXT_FIELDS = {"type", "dtype", "shape", "md5", "data_name", "requires_grad", "Result", "Err_message",
                "Requires_grad Consistent", "value"}


def typed_value(field: str, value):
    if field in _TEXT_FIELDS or not isinstance(value, str):
        return value
    text = value.strip()
    percent = text.endswith("%")
    try:
        number = float(text[:-1] if percent else text)
    except ValueError:
        return value
    if math.isnan(number) or math.isinf(number):
        return value
    return value if percent else number


def _kind(node: str, key: str) -> str:
    rest = key[len(node) + 1:] if key.startswith(node + ".") else key
    head = rest.split(".", 1)[0]
    if head == "input":
        return "inputs"
    if head == "output":
        return "outputs"
    return "parameters"  # parameters.<name> and the <name> keys of parameters_grad nodes


def split_params(node: str, input_data: Dict[str, dict], output_data: Dict[str, dict]) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {"inputs": [], "outputs": [], "parameters": []}
    for source in (input_data, output_data):
        if not isinstance(source, dict):
            continue
        for key, fields in source.items():
            if not isinstance(fields, dict):
                fields = {"value": fields}
            typed = {str(f): typed_value(str(f), v) for f, v in fields.items()}
            out[_kind(node, key)].append({"key": key, "fields": typed})
    return out


def detail(row: dict, path: List[str], precision: Optional[float], overflow: Optional[str],
           subtree: Tuple[Optional[float], Optional[str]], bench: Optional[dict], source: str = "this file") -> dict:
    """The node panel's answer from a stored row. ``source`` names the file in the 400 of a wrongly typed
    ``node_type`` or ``micro_step_id`` (``'abc'``, ``1.5``, a blob: int() made it a 500)."""
    name = row.get("node_name") or ""
    link = row.get("matched_node_link") or []
    params = split_params(name, row.get("input_data") or {}, row.get("output_data") or {})
    dist = row.get("matched_distributed")
    out = {
        "name": name,
        "type": stored_int(row.get("node_type"), source, "node_type", name, -(1 << 15), (1 << 15) - 1),
        "parent": row.get("up_node") or None,
        "path": path,
        "precision": precision,
        "overflow": overflow,
        "subtree_precision": subtree[0],
        "subtree_overflow": subtree[1],
        "micro_step": stored_int(row.get("micro_step_id"), source, "micro_step_id", name, *INT32),
        "inputs": params["inputs"],
        "outputs": params["outputs"],
        "parameters": params["parameters"],
        "stack": [str(s) for s in row.get("stack") or []],
        "matched_node_link": [str(s) for s in link] if isinstance(link, list) else [],
        "counterpart": str(link[-1]) if isinstance(link, list) and link else None,
        "distributed": dist if isinstance(dist, dict) and dist else None,
        "parallel_merge_info": row.get("parallel_merge_info") or None,
        "dump_data_dir": row.get("dump_data_dir") or None,
    }
    if bench is not None:
        out["bench"] = split_params(bench.get("node_name") or "", bench.get("input_data") or {},
                                    bench.get("output_data") or {})
    return out
