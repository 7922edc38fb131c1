"""Legacy ``.vis`` JSON graphs behind the same interface as :class:`DbGraphFile` (one step, one rank).

The file is ``{"NPU": {"root", "dump_data_dir", "node": {name: node}}, "Bench": {...}, "ToolTip", "Colors",
"MicroSteps", "task", "OverflowCheck"}``; nodes are numbered in post-order from the root, as a database does.
"""
import json
import os
import threading
from typing import Dict, Iterator, List, Optional, Tuple

from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.graph_index import GraphIndex
from tbprobe.tb_plugin.graph_store import derived_estimate
from tbprobe.tb_plugin.stored_metrics import METRIC_FIELDS, MetricValue, row_metrics

__all__ = ["VisGraphFile", "MAX_VIS_BYTES"]

# A legacy file is parsed whole; refuse ones that would take the server's memory.
MAX_VIS_BYTES = 2 << 30


def _post_order(graph: dict) -> List[str]:
    nodes = graph.get("node") or {}
    root = graph.get("root") or next(iter(nodes), None)
    order: List[str] = []
    if root is None or root not in nodes:
        return list(nodes)
    seen = {root}
    stack: List[Tuple[str, int]] = [(root, 0)]
    while stack:
        name, k = stack.pop()
        kids = [c for c in (nodes[name].get("subnodes") or []) if c in nodes]
        if k < len(kids):
            stack.append((name, k + 1))
            child = kids[k]
            if child not in seen:
                seen.add(child)
                stack.append((child, 0))
        else:
            order.append(name)
    order.extend(n for n in nodes if n not in seen)  # orphans keep a place (they hang under the root)
    return order


def _check_graph(graph: dict, side: str, source: str) -> None:
    """400 for a graph whose parts are not of the shapes the routes read (the nodes an object of objects, a node's
    subnodes a list, its upnode and root text, its data an object): each was an AttributeError, a 500."""
    nodes = graph.get("node")
    if nodes is not None and not isinstance(nodes, dict):
        raise ApiError(400, f"{source}: the {side} graph's node is not an object of nodes")
    if graph.get("root") is not None and not isinstance(graph.get("root"), str):
        raise ApiError(400, f"{source}: the {side} graph's root is not a node name")
    for name, node in (nodes or {}).items():
        if not isinstance(node, dict):
            raise ApiError(400, f"{source}: {side} node {quoted(name)} is not an object")
        for key, kind, types in (("subnodes", "a list", list), ("upnode", "a name", str), ("data", "an object", dict),
                                 ("input_data", "an object", dict), ("output_data", "an object", dict)):
            value = node.get(key)
            if value is not None and not isinstance(value, types):
                raise ApiError(400, f"{source}: {key} of {side} node {quoted(name)} is not {kind}")
        if not all(isinstance(child, str) for child in node.get("subnodes") or ()):
            raise ApiError(400, f"{source}: subnodes of {side} node {quoted(name)} holds a value that is not a name")


_JSON_FACTOR = 4   # the parsed objects of a JSON text take a few times its bytes


def _micro_steps(value, name: str) -> int:
    """The file's MicroSteps count (absent: 1); 400 for anything but a positive integer (int() was a 500)."""
    if value is None or value == "" or value == 0:
        return 1
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 1 << 31:
        raise ApiError(400, f"{name}: MicroSteps holds {json.dumps(value)[:40]}, not a count")
    return value


class VisGraphFile:
    def __init__(self, path: str):
        self.path = path
        # Results derived from the whole graph (compare table, metrics), filled by queries.py on first use.
        self.derived: dict = {}
        self.derived_lock = threading.Lock()
        self._size = os.path.getsize(path)
        if self._size > MAX_VIS_BYTES:
            raise ApiError(400, f"{os.path.basename(path)}: legacy .vis file too large to open")
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ApiError(400, f"{os.path.basename(path)}: not a readable .vis JSON file ({exc})") from None
        except RecursionError:  # (100,000 nested '[': json's C parser gives up; a 500 that broke /api/runs)
            raise ApiError(400, f"{os.path.basename(path)}: not a .vis graph (nested too deeply)") from None
        if not isinstance(data, dict) or not isinstance(data.get("NPU"), dict):
            raise ApiError(400, f"{os.path.basename(path)}: not a .vis graph (no NPU graph)")
        for side in ("NPU", "Bench"):
            if isinstance(data.get(side), dict):
                _check_graph(data[side], side, os.path.basename(path))
        self._data = data
        self._orders: Dict[str, List[str]] = {}
        self._indexes: Dict[str, GraphIndex] = {}
        self._lock = threading.Lock()
        compare = isinstance(data.get("Bench"), dict)
        self._meta = {
            "graph_type": "compare" if compare else "build",
            "task": data.get("task") or "",
            "steps": [0],
            "ranks": [0],
            "micro_steps": _micro_steps(data.get("MicroSteps"), os.path.basename(path)),
            "overflow_check": bool(data.get("OverflowCheck")),
            "sides": ["NPU", "Bench"] if compare else ["NPU"],
            "node_colors": data.get("Colors") or {},
            "tool_tip": data.get("ToolTip") or {},
            "writer": "msprobe",
            "live": False,
            "schema_version": None,
            "strict_dtype": False,   # (the reference's files: graded by the default)
        }

    def meta(self) -> dict:
        return dict(self._meta)

    def memory_estimate(self) -> int:
        """About how many bytes this open file holds: the parsed JSON (a few times the file's size), the indexes and
        the tables derived from them (the compare table)."""
        with self._lock:
            indexes = list(self._indexes.values())
        with self.derived_lock:
            derived = list(self.derived.values())
        return _JSON_FACTOR * self._size + sum(idx.memory_estimate() for idx in indexes) + derived_estimate(derived)

    def close(self) -> None:
        pass

    def _graph(self, step: int, rank: int, side: str) -> dict:
        graph = self._data.get(side)
        if step != 0 or rank != 0 or not isinstance(graph, dict):
            raise ApiError(404, f"no graph for step {step}, rank {rank}, side {side} in this file")
        return graph

    def index(self, step: int, rank: int, side: str) -> GraphIndex:
        graph = self._graph(step, rank, side)
        with self._lock:
            if side not in self._indexes:
                nodes = graph.get("node") or {}
                order = _post_order(graph)
                rows = []
                for name in order:
                    node = nodes[name]
                    data = node.get("data") or {}
                    rows.append((name, node.get("node_type", 0), node.get("upnode") or None,
                                 data.get("precision_index"), data.get("overflow_level"),
                                 node.get("micro_step_id", 0), bool(node.get("matched_node_link")), None))
                self._orders[side] = order
                self._indexes[side] = GraphIndex(rows, compare=self._meta["graph_type"] == "compare",
                                                 source=os.path.basename(self.path))
            return self._indexes[side]

    def node(self, step: int, rank: int, side: str, name: str) -> dict:
        graph = self._graph(step, rank, side)
        node = (graph.get("node") or {}).get(name)
        if not isinstance(node, dict):
            raise ApiError(404, f"no node named {quoted(name)} in this graph")
        data = node.get("data") or {}
        return {
            "node_name": name, "node_type": node.get("node_type", 0), "up_node": node.get("upnode") or "",
            "precision_index": data.get("precision_index"), "overflow_level": data.get("overflow_level"),
            "micro_step_id": node.get("micro_step_id", 0), "matched_node_link": node.get("matched_node_link") or [],
            "matched_distributed": node.get("matched_distributed") or {},
            "parallel_merge_info": node.get("parallel_merge_info") or [],
            "input_data": node.get("input_data") or {}, "output_data": node.get("output_data") or {},
            "stack": node.get("stack_info") or [], "dump_data_dir": graph.get("dump_data_dir"),
        }

    def data_rows(self, step: int, rank: int, side: str) -> Iterator[Tuple[str, int, dict, dict]]:
        graph = self._graph(step, rank, side)
        self.index(step, rank, side)
        nodes = graph.get("node") or {}
        for order, name in enumerate(self._orders[side]):
            node = nodes[name]
            if node.get("input_data") or node.get("output_data"):
                yield name, order, node.get("input_data") or {}, node.get("output_data") or {}

    def metric_table(self, step: int, rank: int, side: str, fields=METRIC_FIELDS) -> Dict[str, Dict[str, MetricValue]]:
        """node name -> {metric: its worst output figure} (graph_store.row_metrics, as for a database)."""
        out: Dict[str, Dict[str, MetricValue]] = {}
        for name, _, inp, outp in self.data_rows(step, rank, side):
            metrics = row_metrics(name, inp, outp, fields)
            if metrics:
                out[name] = metrics
        return out

    def prefetch(self, step: int, rank: int, sides) -> None:
        pass

    def stored_findings(self, step: int, rank: int) -> Optional[dict]:
        return None

    def run_first_divergence(self) -> Optional[dict]:
        return None     # (as msprobe's databases: no stored findings to take it from)

    def data_flow(self, step: int, rank: int, side: str, name: str) -> Optional[dict]:
        return None     # (the reference's .vis files hold no data flow)
