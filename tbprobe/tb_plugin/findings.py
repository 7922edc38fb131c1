"""Where a graph first goes wrong: the first divergence (earliest error, else warning, leaves first) and the first
overflow, in execution order. tbprobe's files store them (tbprobe_findings); for msprobe's files they are computed
from the stored results, the first overflow by the graph builder's own rule (as for the bench side, which has no
stored finding)."""
from typing import Dict, List, Optional, Tuple

import numpy as np

from tbprobe.graph_builder import rollup
from tbprobe.graph_builder.compare import no_longer_passes
from tbprobe.graph_builder.model import NODE_API_COLLECTION, Graph, Node
from tbprobe.tb_plugin.api_error import ApiError
from tbprobe.tb_plugin.graph_index import (
    OVERFLOW_LEVELS,
    PRECISION_CLASSES,
    GraphIndex,
    precision_classes,
    stored_int,
)
from tbprobe.tb_plugin.stored_metrics import metric_number, row_metrics

NODE_API_COLLECTION_TYPE = int(NODE_API_COLLECTION)

__all__ = ["stored_finding", "first_divergence", "first_overflow", "nonfinite_enters", "divergence_why"]


def stored_finding(idx: GraphIndex, found: Optional[dict]) -> Optional[dict]:
    """A finding from tbprobe's table in the same shape as a computed one (plus the stored ``detail``)."""
    if not found or found.get("name") not in idx.by_name:
        return None
    i = idx.by_name[found["name"]]
    prec = float(idx.precision[i])
    level = PRECISION_CLASSES[precision_classes(idx.precision[i: i + 1])[0]]
    # (as stored: 'x' went out as the text "x"; a wrongly typed one is the file's 400, as in the index)
    raw = found.get("exec_order")
    exec_order = None if raw is None or raw == "" else stored_int(raw, idx.source, "tbprobe_findings.exec_order",
                                                                  idx.names[i])
    return {"name": idx.names[i], "order": i, "exec_order": exec_order,
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
                    "precision": float(idx.precision[best]), "level": level, "path": idx.path(best),
                    "detail": {"rule": f"earliest_{level}"}}
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
    other = _other_side(graph_file, side)
    for i in critical:
        name = idx.names[i]
        node = _stand_in_node(graph_file, idx, i, step, rank, side, other)
        node.overflow = rollup.FINITE_IN_BAD_OUT
        graph = Graph(side, step, rank)
        graph.nodes[name] = node
        if rollup.first_overflow(graph) is node:
            return {"name": name, "order": i, "exec_order": int(idx.exec_order[i]),
                    "overflow": OVERFLOW_LEVELS[idx.overflow[i]], "path": idx.path(i)}
    return None


def nonfinite_enters(graph_file, idx: GraphIndex, step: int, rank: int, side: str) -> Optional[str]:
    """With no first overflow: the node whose tensor inputs first hold Inf/NaN that no recorded call made, by the
    graph builder's rule (``rollup.nonfinite_enters``: the earliest node holding an Inf/NaN, when it is in its
    inputs and its counterpart's inputs are not the same), on stand-ins of the overflow nodes in execution order;
    rows are read until the rule decides. The Overflow page tags it: a GradScaler's overflow (the loss gradient
    cast to float16 in the backward, a call no dump records) had no node named at all."""
    found = np.flatnonzero((idx.overflow > 0) & (idx.types != NODE_API_COLLECTION_TYPE))
    found = found[np.argsort(idx.exec_order[found], kind="stable")].tolist()
    other = _other_side(graph_file, side)
    node = rollup.nonfinite_enters(_stand_in_node(graph_file, idx, i, step, rank, side, other) for i in found)
    return node.name if node is not None else None


def _other_side(graph_file, side: str) -> Optional[str]:
    """The file's other side ("Bench" for "NPU" and back), None in a build (one side)."""
    other = "Bench" if side == "NPU" else "NPU"
    return other if other in graph_file.meta()["sides"] else None


def _stand_in_node(graph_file, idx: GraphIndex, i: int, step: int, rank: int, side: str,
                   other: Optional[str]) -> Node:
    """A graph builder Node for row i of the index, its entry rebuilt from the stored row and, when `other` (the
    other side) is in the file, its stored counterpart as its match: what the builder's rules read."""
    name = idx.names[i]
    entry, link = _stored_entry(graph_file, step, rank, side, name)
    node = Node(name, str(int(idx.types[i])), entry=entry, exec_order=int(idx.exec_order[i]))
    node.match = _stand_in(graph_file, step, rank, other, link) if other is not None else None
    return node


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
            rest = _suffix(name, key)
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


_RULES = ("inputs_pass", "difference_enters", "earliest_error", "earliest_diverging", "earliest_warning")


def _fails(fields: dict) -> bool:
    """A stored input, argument or parameter that no longer passes, by the graph builder's own test (its rows
    write the NormRelativeErr in percent)."""
    result = str(fields.get("Result") or "").lower()
    nre = metric_number(fields.get("NormRelativeErr"))
    return no_longer_passes(result if result in ("error", "warning") else "pass",
                            None if nre is None else nre / 100.0, metric_number(fields.get("Cosine")))


def _is_tensor(fields: dict) -> bool:
    return "tensor" in str(fields.get("type") or "").lower()


def _suffix(name: str, key: str) -> str:
    return key[len(name) + 1:] if key.startswith(name + ".") else key


def divergence_why(graph_file, step: int, rank: int, found: dict) -> dict:
    """Why the first divergence is where it is, for the page to say (it went to a node drawn as passing with no
    word why): ``{"rule", "flagged", "worst_output", "inputs_match", "differs"}``.

    ``rule``: how the graph builder chose it (its findings detail: "inputs_pass", "difference_enters",
    "earliest_error", "earliest_diverging"; computed findings: "earliest_error" / "earliest_warning"), null for
    files written before the builder stored it. ``flagged``: whether the node is drawn as flagged, its own precision
    a warning or an error (false: it is drawn as passing, the reference's rule letting its output differ because a
    parameter or argument differs too). ``worst_output``: ``{"metric", "value"}``, its worst output NormRelativeErr in percent (Cosine in tensor
    mode), as the detail gives it, else from the node's row. ``inputs_match``: every tensor input passes
    (parameters and non-tensor arguments aside). ``differs``: the inputs, arguments and parameters that no longer
    pass, ``[{"key": "input.1", "kind": "parameter"|"argument"|"leaf"|"input", "debug", "bench"}]`` (the values of
    a non-tensor argument on both sides; "leaf": a weight passed as an argument, where the builder says the
    difference enters; "input": a tensor input that differs already)."""
    detail = found.get("detail") if isinstance(found.get("detail"), dict) else {}
    name = found["name"]
    rule = detail.get("rule") if detail.get("rule") in _RULES else None
    # (drawn as flagged, a warning as much as an error: the stored word is the builder's "precision is an error",
    # and a warning node, yellow on the page, was said to be "drawn as passing")
    flagged = found.get("level") in ("error", "warning")
    # (warning_only: the builder's warnings fallback, no node of that step an error: a bf16 run against an fp32
    # one warns on rounding through the tenfold rule, and the page read such a warning as a divergence)
    why: Dict[str, object] = {"rule": rule, "flagged": flagged, "worst_output": None, "inputs_match": None,
                              "differs": [], "warning_only": detail.get("warning_only") is True}
    try:
        row = graph_file.node(step, rank, "NPU", name)
    except ApiError:
        row = None
    worst = detail.get("worst_output")
    if isinstance(worst, dict) and isinstance(worst.get("metric"), str):
        why["worst_output"] = {"metric": worst["metric"], "value": worst.get("value")}
    if row is None:
        return why
    inputs, outputs = row.get("input_data") or {}, row.get("output_data") or {}
    if why["worst_output"] is None:
        metrics = row_metrics(name, inputs, outputs, ("NormRelativeErr", "Cosine"))
        for metric in ("NormRelativeErr", "Cosine"):
            if metric in metrics:
                why["worst_output"] = {"metric": metric, "value": metrics[metric]}
                break
    bench = _bench_values(graph_file, step, rank, row)
    entering = {str(e.get("slot")): e.get("kind") for e in detail.get("enters") or () if isinstance(e, dict)}
    differs: List[dict] = []
    inputs_match = True
    for key, fields in (inputs.items() if isinstance(inputs, dict) else ()):
        if not isinstance(fields, dict):
            continue
        suffix = _suffix(name, key)
        head, _, slot = suffix.partition(".")
        # (the builder's `enters` also names a weight a few percent off, under the 10 % that _fails tests: the
        # first divergence of a graph without an error)
        if not _fails(fields) and not ((head == "input" and slot in entering) or suffix in entering):
            continue
        if head != "input":
            kind = "parameter"
        elif not _is_tensor(fields):
            kind = "argument"
        else:
            kind = "leaf" if entering.get(slot) == "leaf" else "input"
            if kind == "input":
                inputs_match = False
        item = {"key": suffix, "kind": kind}
        if kind == "argument":
            item["debug"] = fields.get("value")
            item["bench"] = bench.get(suffix)
        differs.append(item)
    why["inputs_match"] = inputs_match
    why["differs"] = differs
    return why


def _bench_values(graph_file, step: int, rank: int, row: dict) -> Dict[str, object]:
    """The counterpart's non-tensor argument values by key suffix ("input.1" -> "0.5"); {} without one."""
    link = row.get("matched_node_link")
    if not isinstance(link, list) or not link or "Bench" not in graph_file.meta()["sides"]:
        return {}
    peer = str(link[-1])
    try:
        other = graph_file.node(step, rank, "Bench", peer)
    except ApiError:
        return {}
    data = other.get("input_data") or {}
    return {_suffix(peer, k): v.get("value") for k, v in (data.items() if isinstance(data, dict) else ())
            if isinstance(v, dict) and "value" in v}
