"""Beyond the reference: the worst result of every subtree (roll-up), and per graph the first divergent node
(the earliest error in execution order whose inputs still pass) and the first overflow (the earliest node whose
inputs are finite and outputs are not). Data-flow edges, when the collector recorded them, let the first
divergence be traced back to the producers of its inputs."""
import json
from typing import Dict, List, Optional, Tuple

from tbprobe.graph_builder.model import NODE_API_COLLECTION, Graph, Node
from tbprobe.graph_builder.overflow import LEVEL_RANK

FINITE_IN_BAD_OUT = "critical"   # overflow_level's name for "inputs finite, an output inf/nan"

__all__ = ["roll_up", "first_divergence", "first_overflow", "findings_rows", "trace_back"]


def roll_up(graph: Graph) -> None:
    for node in graph.post or graph.walk():
        prec = node.precision
        ovf = node.overflow
        for child in node.children:
            cp = child.subtree_precision
            if cp is not None and (prec is None or cp > prec):
                prec = cp
            if LEVEL_RANK[child.subtree_overflow] > LEVEL_RANK[ovf]:
                ovf = child.subtree_overflow
        node.subtree_precision = prec
        node.subtree_overflow = ovf


def _leaves_in_exec_order(graph: Graph) -> List[Node]:
    nodes = [n for n in graph.nodes.values() if n.exec_order is not None and n.node_type != NODE_API_COLLECTION]
    nodes.sort(key=lambda n: n.exec_order)
    return nodes


def first_divergence(graph: Graph) -> Optional[Node]:
    """Earliest node (execution order = dump.json completion order, APIs before the module around them) with
    precision error whose inputs still pass; falls back to the earliest error."""
    errors = [n for n in _leaves_in_exec_order(graph) if n.precision == 1]
    for node in errors:
        if node.inputs_ok:
            return node
    return errors[0] if errors else None


def first_overflow(graph: Graph) -> Optional[Node]:
    """Earliest node in execution order (dump.json completion order, not the most severe level) whose inputs are
    finite and an output is Inf/NaN. That is exactly the "critical" scene of overflow_level: "high" means inf/nan
    on both sides or a finite output norm ratio > 100, "medium" bad inputs only - neither is where an overflow
    starts. Levels are only graded with -oc, so without it there is no first overflow."""
    for node in _leaves_in_exec_order(graph):
        if node.overflow == FINITE_IN_BAD_OUT:
            return node
    return None


def trace_back(graph: Graph, node: Node, limit: int = 50) -> List[str]:
    """Producers of the node's inputs, walked back along data-flow edges while they are not passing."""
    out: List[str] = []
    seen = {node.name}
    frontier = [node.name]
    while frontier and len(out) < limit:
        name = frontier.pop(0)
        for producer in (graph.edges.get(name) or {}).values():
            if producer in seen:
                continue
            seen.add(producer)
            out.append(producer)
            prod = graph.nodes.get(producer)
            if prod is not None and (prod.precision or 0) > 0:
                frontier.append(producer)
    return out


def findings_rows(graph: Graph) -> Tuple[List[tuple], Dict[str, Optional[str]]]:
    """Rows for tbprobe_findings (graph_id, kind, node_name, exec_order, detail) and a summary dict."""
    rows = []
    summary: Dict[str, Optional[str]] = {"first_divergence": None, "first_overflow": None}
    div = first_divergence(graph)
    if div is not None:
        detail = {"precision_index": div.precision, "path": div.path(), "traced_from": trace_back(graph, div),
                  "matched": div.match.name if div.match is not None else None}
        rows.append((graph.graph_id, "first_divergence", div.name, div.exec_order, json.dumps(detail)))
        summary["first_divergence"] = div.name
    ovf = first_overflow(graph)
    if ovf is not None:
        detail = {"overflow_level": ovf.overflow, "path": ovf.path()}
        rows.append((graph.graph_id, "first_overflow", ovf.name, ovf.exec_order, json.dumps(detail)))
        summary["first_overflow"] = ovf.name
    return rows, summary
