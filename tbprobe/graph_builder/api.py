"""The functions other parts of tbprobe call: the collector's live build rows and the plugin's manual match."""
import ast
import json
from typing import Any, Dict, List, Optional, Tuple

from tbprobe.formats.dump_dir import RankDir
from tbprobe.graph_builder.compare import compare_entries
from tbprobe.graph_builder.engine import finish_graph, naming_files
from tbprobe.graph_builder.load import detect_mode, load_rank
from tbprobe.graph_builder.rollup import roll_up
from tbprobe.graph_builder.rows import graph_rows

__all__ = ["build_rank_rows", "build_rank_tables", "compare_nodes"]


def build_rank_rows(rank_dir: RankDir, side: str = "NPU", overflow_check: bool = False
                    ) -> Tuple[List[list], List[Tuple[str, str]], List[tuple]]:
    """Build one rank's graph and return (tb_nodes rows, tb_stack rows, tbprobe_node_ext rows), ready for
    VisDbWriter.add_nodes / add_stacks / add_node_ext or LiveVisDb."""
    rows, stacks, ext, _ = build_rank_tables(rank_dir, side, overflow_check)
    return rows, stacks, ext


def build_rank_tables(rank_dir: RankDir, side: str = "NPU", overflow_check: bool = False
                      ) -> Tuple[List[list], List[Tuple[str, str]], List[tuple], List[tuple]]:
    """build_rank_rows and the graph's tbprobe_edges rows (its data flow, from dataflow.json) besides."""
    graph = load_rank(rank_dir, side)
    with naming_files(graph):   # (a bad entry found in the row work: its file named)
        with_md5 = detect_mode(graph) == "md5"
        finish_graph(graph, with_md5, overflow_check)
        roll_up(graph)
        return graph_rows(graph, with_md5)


_COMPARE_FIELDS = {"Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                   "MeanRelativeErr", "NormRelativeErr", "Requires_grad Consistent", "Result", "Err_message",
                   "Cosine", "EucDist", "MaxAbsErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"}


def _parse(text: Any) -> Any:
    """A stored string back to the dump value it came from ("0.5" -> 0.5, "True" -> True, "[3, 4]" -> [3, 4])."""
    if not isinstance(text, str):
        return text
    if text == "null":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text in ("inf", "-inf", "nan"):
        return float(text)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    if text.startswith("["):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def _to_entry(node_name: str, data: Dict[str, Dict[str, str]]) -> dict:
    """Stored input_data + output_data -> a dump-like entry with `input_kwargs`-style keyed items, so that
    flatten_entry reproduces the same param keys."""
    entry: Dict[str, Any] = {"input_kwargs": {}, "output": []}
    outputs: Dict[int, dict] = {}
    prefix = node_name + "."
    for key, fields in data.items():
        item: Optional[dict]
        if set(fields) == {"value"} and fields["value"] == "null":
            item = None
        else:
            item = {}
            scalar = "value" in fields
            for f, v in fields.items():
                if f in _COMPARE_FIELDS or (scalar and f in ("Max", "Min", "Mean", "Norm", "dtype", "shape",
                                                               "requires_grad", "data_name")):
                    continue
                if f == "data_name" and v == "-1":
                    continue
                item[f] = v if f in ("type", "dtype", "md5", "data_name") else _parse(v)
            if scalar:
                item["value"] = _parse(fields["value"])
        suffix = key[len(prefix):] if key.startswith(prefix) else key
        if ".parameters_grad" in node_name:
            entry.setdefault("_grads", {})[suffix] = [item]
        elif suffix.startswith("output."):
            idx = suffix.split(".")[1]
            outputs[int(idx) if idx.isdigit() else len(outputs)] = item
        elif suffix.startswith("input."):
            entry["input_kwargs"][suffix[len("input."):]] = item
        elif suffix.startswith("parameters."):
            entry.setdefault("parameters", {})[suffix[len("parameters."):]] = item
        else:
            entry["input_kwargs"][suffix] = item
    entry["output"] = [outputs[k] for k in sorted(outputs)]
    if ".parameters_grad" in node_name:
        return entry.get("_grads", {})
    return entry


def compare_nodes(debug_node_data: dict, bench_node_data: dict, mode: str, strict_dtype: bool = False
                  ) -> Tuple[Optional[float], dict, dict]:
    """Compare two nodes as stored in tb_nodes (for manual matches in the plugin).

    `debug_node_data` / `bench_node_data`: {"node_name": str (optional), "input_data": {param_key: {field: str}},
    "output_data": {...}} - the JSON-decoded columns of each node's row. `mode`: statistics | md5 | structure
    (or the tb_config task names summary | md5 | structure). Tensor mode needs the tensor files, which stored
    rows do not carry, so it falls back to statistics fields. `strict_dtype`: every floating-point dtype
    difference an error, as the build that wrote the rows graded (`tbprobe graph --strict-dtype`); else a note.

    Returns (precision_index, input_data, output_data): the debug node's new precision index (0 pass, 0.5 warning,
    1 error, None when nothing could be compared) and its input_data / output_data with the compare fields of
    `mode` added (the reference's field names and string formats), ready to be written back into its row."""
    mode = {"summary": "statistics", "all": "statistics", "tensor": "statistics"}.get(mode, mode)
    if mode not in ("statistics", "md5", "structure"):
        mode = "statistics"
    debug_node_data = _decoded(debug_node_data)
    bench_node_data = _decoded(bench_node_data)
    d_name = debug_node_data.get("node_name") or _common_name(debug_node_data)
    b_name = bench_node_data.get("node_name") or _common_name(bench_node_data)
    d_entry = _to_entry(d_name, {**(debug_node_data.get("input_data") or {}),
                                 **(debug_node_data.get("output_data") or {})})
    b_entry = _to_entry(b_name, {**(bench_node_data.get("input_data") or {}),
                                 **(bench_node_data.get("output_data") or {})})
    res = compare_entries(d_name, d_entry, b_name, b_entry, mode, strict_dtype=strict_dtype)
    return res.precision, json.loads(res.input_text), json.loads(res.output_text)


def _decoded(node_data: dict) -> dict:
    """Rows may come with input_data / output_data still as JSON text."""
    out = dict(node_data)
    for key in ("input_data", "output_data"):
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key] or "{}")
    return out


def _common_name(node_data: dict) -> str:
    keys = list((node_data.get("input_data") or {}).keys()) + list((node_data.get("output_data") or {}).keys())
    for key in keys:
        for marker in (".input.", ".output.", ".parameters."):
            if marker in key:
                return key.split(marker)[0]
    return keys[0].rsplit(".", 1)[0] if keys else ""
