"""Where a graph first goes wrong: the first divergence (earliest error, else warning, leaves first) and the first
overflow, in execution order. tbprobe's files store them (tbprobe_findings); for msprobe's files they are computed
from the stored results, the first overflow by the graph builder's own rule (as for the bench side, which has no
stored finding)."""
from typing import Optional, Tuple

import numpy as np

from tbprobe.graph_builder import rollup
from tbprobe.graph_builder.model import Graph, Node
from tbprobe.tb_plugin.api_error import ApiError
from tbprobe.tb_plugin.graph_index import OVERFLOW_LEVELS, PRECISION_CLASSES, GraphIndex, precision_classes

__all__ = ["stored_finding", "first_divergence", "first_overflow"]


def stored_finding(idx: GraphIndex, found: Optional[dict]) -> Optional[dict]:
    """A finding from tbprobe's table in the same shape as a computed one (plus the stored ``detail``)."""
    if not found or found.get("name") not in idx.by_name:
        return None
    i = idx.by_name[found["name"]]
    prec = float(idx.precision[i])
    level = PRECISION_CLASSES[precision_classes(idx.precision[i: i + 1])[0]]
    return {"name": idx.names[i], "order": i, "exec_order": found.get("exec_order"),
            "precision": None if prec != prec else prec, "level": level,
            "overflow": OVERFLOW_LEVELS[idx.overflow[i]] or None, "path": idx.path(i), "detail": found.get("detail")}


def _leaves(idx: GraphIndex) -> np.ndarray:
    return np.diff(idx.child_start) == 0


def _earliest(idx: GraphIndex, mask: np.ndarray) -> Optional[int]:
    found = np.flatnonzero(mask)
    if not len(found):
        return None
    return int(found[np.argmin(idx.exec_order[found])])


def first_divergence(idx: GraphIndex) -> Optional[dict]:
    """The earliest node in execution order whose own result is an error (leaves first), else a warning."""
    classes = precision_classes(idx.precision)
    leaves = _leaves(idx)
    for level in ("error", "warning"):
        is_level = classes == PRECISION_CLASSES.index(level)
        best = _earliest(idx, is_level & leaves)
        best = best if best is not None else _earliest(idx, is_level)
        if best is not None:
            return {"name": idx.names[best], "order": best, "exec_order": int(idx.exec_order[best]),
                    "precision": float(idx.precision[best]), "level": level, "path": idx.path(best)}
    return None


def first_overflow(graph_file, idx: GraphIndex, step: int, rank: int, side: str) -> Optional[dict]:
    """Where an overflow starts, by the graph builder's own rule (``rollup.first_overflow``, the finding tbprobe
    stores for the debug graph): the earliest node in execution order, API collections aside, whose inputs are
    finite and an output Inf/NaN (critical), skipping one whose non-finite outputs come from a non-finite
    non-tensor argument (a masked_fill(mask, -inf)) or whose counterpart's outputs are non-finite the same way.
    None when no node is critical: a high or medium one had Inf/NaN coming in already, or a norm ratio past 100,
    and is no start (this fell back to the earliest of those, which the Overflow tab then tagged as the start on
    the bench side and on msprobe's files while the debug graph of tbprobe's named none).

    The rule runs on stand-ins of the critical nodes, one at a time in execution order: each a graph builder
    ``Node`` holding the entry rebuilt from its stored row, its stored counterpart beside it (the link the
    builder matched, as in the stored finding; a side-file match is not the file's until applied). Rows are read
    only up to the first that qualifies."""
    critical = np.flatnonzero(idx.overflow == OVERFLOW_LEVELS.index(rollup.FINITE_IN_BAD_OUT))
    critical = critical[np.argsort(idx.exec_order[critical], kind="stable")].tolist()
    other = "Bench" if side == "NPU" else "NPU"
    has_other = other in graph_file.meta()["sides"]
    for i in critical:
        name = idx.names[i]
        entry, link = _stored_entry(graph_file, step, rank, side, name)
        node = Node(name, str(int(idx.types[i])), entry=entry, exec_order=int(idx.exec_order[i]))
        node.overflow = rollup.FINITE_IN_BAD_OUT
        node.match = _stand_in(graph_file, step, rank, other, link) if has_other else None
        graph = Graph(side, step, rank)
        graph.nodes[name] = node
        if rollup.first_overflow(graph) is node:
            return {"name": name, "order": i, "exec_order": int(idx.exec_order[i]),
                    "overflow": OVERFLOW_LEVELS[idx.overflow[i]], "path": idx.path(i)}
    return None


def _stand_in(graph_file, step: int, rank: int, side: str, link) -> Optional[Node]:
    """The counterpart a stored link names, with its entry rebuilt; None without a link or such a node."""
    if not isinstance(link, list) or not link:
        return None
    entry, _ = _stored_entry(graph_file, step, rank, side, str(link[-1]))
    return None if entry is None else Node(str(link[-1]), "1", entry=entry)


# The stored values the overflow rules read, typed again as the dump had them (every value is text in a row:
# "inf", "-inf", "nan", "3").
_TYPED = (("Max", float), ("Min", float), ("value", float), ("nan_count", int), ("inf_count", int))
_CONTAINER = {"input": "input_kwargs", "parameters": "parameters", "output": "output"}


def _stored_entry(graph_file, step: int, rank: int, side: str, name: str) -> Tuple[Optional[dict], list]:
    """(a dump entry rebuilt from a node's stored row, its stored link); (None, []) when the row cannot be read.
    The builder's ``flatten_entry`` gives the entry's items back under their stored keys (an output
    ``<name>.output.<slot>`` comes back as ``<name>.output.0.<slot>``: one to one, on both sides alike)."""
    try:
        row = graph_file.node(step, rank, side, name)
    except ApiError:
        return None, []
    entry: dict = {}
    for source in (row.get("input_data"), row.get("output_data")):
        for key, fields in (source.items() if isinstance(source, dict) else ()):
            rest = key[len(name) + 1:] if key.startswith(name + ".") else key
            head, _, slot = rest.partition(".")
            container = _CONTAINER.get(head) if slot else None
            if container is None:
                container, slot = "input_kwargs", rest
            entry.setdefault(container, {})[slot] = _typed_item(fields)
    link = row.get("matched_node_link")
    return entry, link if isinstance(link, list) else []


def _typed_item(fields) -> Optional[dict]:
    if not isinstance(fields, dict) or "type" not in fields:
        return None   # (a null argument, stored as {"value": "null"})
    item = dict(fields)
    for key, kind in _TYPED:
        value = item.get(key)
        if isinstance(value, str):
            try:
                item[key] = kind(value)
            except ValueError:
                pass
    return item
