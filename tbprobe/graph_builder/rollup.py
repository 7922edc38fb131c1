"""Beyond the reference: the worst result of every subtree (roll-up), and per graph the first divergent node
(the earliest error in execution order whose inputs still pass) and the first overflow (the earliest node whose
inputs are finite and outputs are not). Data-flow edges, when the collector recorded them, let the first
divergence be traced back to the producers of its inputs."""
import json
import math
from typing import Dict, Iterable, List, Optional, Tuple

from tbprobe.graph_builder.model import NODE_API_COLLECTION, Graph, Node
from tbprobe.graph_builder.overflow import LEVEL_RANK

FINITE_IN_BAD_OUT = "critical"   # overflow_level's name for "inputs finite, an output inf/nan"
# where a node's output diverges though the error rule passed it (a differing parameter): the worst output
# NormRelativeErr past the error rule's output bound (statistics), 1 - cosine past the cosine rule's drop (tensor)
_STATS_DIVERGES = 0.5
_TENSOR_DIVERGES = 0.1
# a weight whose Norm differs from the bench's by this much (a fraction: 1 %) is a difference entering, not
# rounding: a weight rounded to bf16 is about 0.1-0.2 % off, to fp16 less (a bf16 run against an fp32 run, the
# same seed, differs in no weight at all at step 0 under autocast)
_WEIGHT_DIFFERS = 0.01

__all__ = ["roll_up", "first_divergence", "first_overflow", "nonfinite_enters", "findings_rows", "trace_back"]


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


def first_divergence(graph: Graph, mode: Optional[str] = None) -> Optional[Node]:
    """Earliest node (execution order = dump.json completion order, APIs before the module around them) whose
    output diverges (a precision error, or an output NormRelativeErr past the error rule's 50 % that the rule did
    not flag because a parameter differs too) while its inputs still pass; falls back to the earliest error, then
    to the earliest diverging node; with none of those, the first warning whose inputs pass, then the earliest
    warning."""
    return _first_divergence(graph, mode)[0]


# Why first_divergence chose its node (findings_rows' detail "rule"): its compared inputs all pass; the inputs that
# fail are where the difference enters (a non-tensor argument, a weight passed as an argument); or, no node being
# either, the earliest error, else the earliest node whose output diverges.
RULE_INPUTS_PASS = "inputs_pass"
RULE_DIFFERENCE_ENTERS = "difference_enters"
RULE_EARLIEST_ERROR = "earliest_error"
RULE_EARLIEST_DIVERGING = "earliest_diverging"
RULE_EARLIEST_WARNING = "earliest_warning"


def _first_divergence(graph: Graph, mode: Optional[str] = None) -> Tuple[Optional[Node], Optional[str]]:
    """(first_divergence's node, the rule that chose it: one of the RULE_ names), (None, None) when none."""
    task = graph.task

    def diverges(n: Node) -> bool:
        return n.precision == 1 or _past_bound(n, task)

    ordered = _leaves_in_exec_order(graph)
    diverging = [n for n in ordered if diverges(n)]
    earlier = _EarlierOutputs(ordered, mode or graph.task, graph.strict_dtype)
    for node in diverging:
        if node.inputs_ok:
            return node, RULE_INPUTS_PASS
        if _nothing_carried_in(graph, node, mode or graph.task, earlier):
            return node, RULE_DIFFERENCE_ENTERS
    errors = [n for n in diverging if n.precision == 1]
    if errors:
        return errors[0], RULE_EARLIEST_ERROR
    if diverging:
        return diverging[0], RULE_EARLIEST_DIVERGING
    # No error: a weight a few percent off moves the outputs after it by a few percent, which no rule flags,
    # while a bf16 run against an fp32 one is full of tenfold warnings on tiny amplifications (0.0003 % -> 0.03 %)
    # before it: the earliest node whose inputs pass and a weight of which differs is where the difference enters
    for node in ordered:
        if node.inputs_ok and node.precision is not None and _differing_weights(graph, node):
            return node, RULE_DIFFERENCE_ENTERS
    # No error and no output past the bound, but warnings: a small difference (bf16 for one layer, a weight a few
    # percent off) said "first divergent node: none" where msprobe's graph, opened in the plugin, named its
    # earliest warning. The first warning whose inputs pass, else the earliest warning.
    warnings = [n for n in ordered if n.precision == 0.5]
    for node in warnings:
        if node.inputs_ok:
            return node, RULE_INPUTS_PASS
    return (warnings[0], RULE_EARLIEST_WARNING) if warnings else (None, None)


def _differing_weights(graph: Graph, node: Node) -> List[Tuple[str, dict]]:
    """(slot, debug item) of the weights of `node` whose Norm differs from the bench's by _WEIGHT_DIFFERS or
    more: its parameters ("parameters.weight"), and with the collector's data flow, not at L0, a forward call's
    tensor input that trains and that no recorded call made (a weight passed as an argument, "1")."""
    bench = node.match
    if bench is None or not node.has_entry or not bench.has_entry or not node.entry or not bench.entry:
        return []
    from tbprobe.graph_builder.items import flatten_entry, is_tensor_item

    leaves = bool(graph.edges) and ".forward" in node.name and graph.level != "L0"
    flow = (graph.edges.get(node.name) or {}) if leaves else {}
    cut_d, cut_b = len(node.name) + 1, len(bench.name) + 1
    b_map = {k[cut_b:]: v for k, v in flatten_entry(bench.name, bench.entry)[0]}
    out = []
    for key, d in flatten_entry(node.name, node.entry)[0]:
        suffix = key[cut_d:]
        b = b_map.get(suffix)
        if not is_tensor_item(d) or not is_tensor_item(b):
            continue
        slot = suffix if suffix.startswith("parameters.") else suffix.split(".", 1)[-1]
        weight = suffix.startswith("parameters.") or (
            leaves and slot not in flow and d.get("requires_grad") is True)
        if weight and _weight_differs(d, b):
            out.append((slot, d))
    return out


def _weight_differs(d: dict, b: dict) -> bool:
    """Whether a weight's statistics show it `_WEIGHT_DIFFERS` (1 %) of its Norm or more away from the bench's:
    the distance |d - b| (L2) that they prove, at least each of |Norm d - Norm b|, |Max d - Max b|, |Min d - Min b|
    and sqrt(element count) x |Mean d - Mean b|, against the larger of the two Norms (rounding to bf16 moves every
    value by under 0.4 %, so none of them by 1 %). A weight all zeros on one side only (a LoRA adapter's B,
    initialised to zeros, against a trained one) differs by all of its Norm; before, a bench Norm of 0 was
    passed over. Non-finite on one side only (a NaN or Inf value, or an overflowed Norm) differs too; both
    non-finite alike is no evidence."""
    dn, bn = _stat(d.get("Norm")), _stat(b.get("Norm"))
    if dn is None or bn is None:
        return False
    stats = [(dn, bn)] + [(_stat(d.get(k)), _stat(b.get(k))) for k in ("Max", "Min", "Mean")]
    finite = [(x is None or math.isfinite(x), y is None or math.isfinite(y)) for x, y in stats]
    if any(fx != fy for fx, fy in finite):
        return True
    if not (math.isfinite(dn) and math.isfinite(bn)):
        return False
    scale = max(abs(dn), abs(bn))
    if scale == 0:
        return False
    numel = _numel(d.get("shape"))
    gap = abs(dn - bn)
    for (x, y), (fx, _) in zip(stats[1:], finite[1:]):
        if x is not None and y is not None and fx:
            gap = max(gap, abs(x - y))
    mean_d, mean_b = stats[3]
    if numel is not None and mean_d is not None and mean_b is not None and finite[3][0]:
        gap = max(gap, math.sqrt(numel) * abs(mean_d - mean_b))
    return gap >= _WEIGHT_DIFFERS * scale


def _numel(shape) -> Optional[int]:
    if not isinstance(shape, list):
        return None
    numel = 1
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            return None
        numel *= dim
    return numel


def _past_bound(n: Node, task: str) -> bool:
    """An output past first_divergence's bound (50 % NormRelativeErr, or a Cosine 0.1 off in tensor mode) that
    the node rules judge."""
    limit = _TENSOR_DIVERGES if task == "tensor" else _STATS_DIVERGES
    if n.worst_metric is None or not n.worst_metric > limit:
        return False
    # (an output the node rules do not judge, uninitialised memory's, is no divergence either; imported here:
    # a build, which has no metrics, loads no compare module)
    from tbprobe.graph_builder.compare import outside_the_node_rules

    return not outside_the_node_rules(n.name)


def is_warning_only(node: Node, rule: Optional[str], task: str) -> bool:
    """Whether _first_divergence chose `node` by its warnings fallback (no error, no output past the bound in the
    graph): such a finding never outranks another rank's error of the same step, and the summary says what it
    is (the reference's tenfold rule warns on tiny amplifications too, noise between two healthy runs)."""
    return rule == RULE_EARLIEST_WARNING or (rule == RULE_INPUTS_PASS and node.precision == 0.5
                                             and not _past_bound(node, task))


_SAME_SUM = 1e-4   # Mean and Norm of a reshaped copy are summed in another order: equal to about float32's digits


def _stat(v) -> Optional[float]:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    return float(v)


def _bounds_key(item: dict) -> Optional[tuple]:
    """A tensor's element count, dtype, Max and Min (NaN as one value): a view, a transpose or a reshape keeps
    all four exactly. None where the statistics say nothing of which tensor it is: Max equal to Min (all zeros,
    all ones, all NaN: a zeros buffer, a mask or a bias of the same count would pass for it) or no statistics."""
    mx, mn = _stat(item.get("Max")), _stat(item.get("Min"))
    shape = item.get("shape")
    if mx is None or mn is None or not isinstance(shape, list):
        return None
    numel = 1
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool):
            return None
        numel *= dim
    key_mx, key_mn = ("nan" if mx != mx else mx), ("nan" if mn != mn else mn)
    if key_mx == key_mn:
        return None
    return (numel, item.get("dtype"), key_mx, key_mn)


def _close(a: Optional[float], b: Optional[float]) -> bool:
    if a is None or b is None:
        return a is b
    if a != a or b != b:
        return a != a and b != b
    return a == b or abs(a - b) <= _SAME_SUM * max(abs(a), abs(b))


class _EarlierOutputs:
    """The statistics of the recorded outputs, read in execution order as far as asked (the first divergence's
    candidates come in that order: each entry is decoded once at most). An item "is" an earlier output when its
    element count, dtype, Max and Min are that output's, its Mean and Norm agree to 1e-4 (a reshape sums in
    another order) and that output no longer passes itself (a view of a passing output carries no difference
    in). Max equal to Min is no evidence (_bounds_key)."""

    def __init__(self, ordered: List[Node], mode: str, strict_dtype: bool = False):
        self._ordered = ordered
        self._mode = mode
        self._strict = strict_dtype
        self._next = 0
        self._seen: Dict[tuple, List[Tuple[Optional[float], Optional[float], Node, str]]] = {}
        self._failing: Dict[str, set] = {}   # node name -> its output keys that no longer pass

    def _fails(self, node: Node, key: str) -> bool:
        failing = self._failing.get(node.name)
        if failing is None:
            from tbprobe.graph_builder.compare import failing_outputs

            bench = node.match
            failing = set() if bench is None else {k for k, _ in failing_outputs(
                node.name, node.entry if node.has_entry else None, bench.name,
                bench.entry if bench.has_entry else None, self._mode, self._strict)}
            self._failing[node.name] = failing
        return key in failing

    def holds(self, item: dict, before: int) -> bool:
        key = _bounds_key(item)
        if key is None:
            return False
        from tbprobe.graph_builder.items import flatten_entry, is_tensor_item

        while self._next < len(self._ordered) and self._ordered[self._next].exec_order < before:
            node = self._ordered[self._next]
            self._next += 1
            entry = node.entry if node.has_entry else None
            if entry and node.match is not None:
                cut = len(node.name) + 1
                for k, out in flatten_entry(node.name, entry)[1]:
                    ok = _bounds_key(out) if is_tensor_item(out) else None
                    if ok is not None:
                        self._seen.setdefault(ok, []).append(
                            (_stat(out.get("Mean")), _stat(out.get("Norm")), node, k[cut:]))
        mean, norm = _stat(item.get("Mean")), _stat(item.get("Norm"))
        return any(_close(mean, m) and _close(norm, n) and self._fails(node, k)
                   for m, n, node, k in self._seen.get(key, ()))


def _nothing_carried_in(graph: Graph, node: Node, mode: str, earlier: Optional[_EarlierOutputs] = None) -> bool:
    """Whether every input that no longer passes is one where the difference enters rather than one carried in:
    a non-tensor argument (a constant multiplier, a fill value, an eps: it counts as a differing parameter
    does), or, with the collector's data flow, for a forward call and not at L0 (where a weight is always a
    module's parameter, never an argument), a leaf that trains (requires_grad, made by no recorded call: a
    weight passed as an argument at L1) and whose statistics no earlier recorded output has (the views and
    transposes the collector records without data flow keep them: an activation through one is no leaf). A
    failing tensor input without data flow (msprobe's dumps, a backward record), or one that comes from a
    recorded call or from none and needs no gradient (a gradient the optimizer reads, an unrecorded call's
    output): False, inputs_ok alone decides."""
    if node.match is None:
        return False
    from tbprobe.graph_builder.compare import failing_inputs
    from tbprobe.graph_builder.items import is_tensor_item

    failing = failing_inputs(node.name, node.entry if node.has_entry else None, node.match.name,
                             node.match.entry if node.match.has_entry else None, mode, graph.strict_dtype)
    if not failing:
        return False
    leaves = bool(graph.edges) and ".forward" in node.name and graph.level != "L0"
    flow = (graph.edges.get(node.name) or {}) if leaves else {}

    def enters_here(slot: str, item: dict) -> bool:
        if not is_tensor_item(item):
            return True
        if not leaves or slot in flow or item.get("requires_grad") is not True:
            return False
        return earlier is None or node.exec_order is None or not earlier.holds(item, node.exec_order)

    return all(enters_here(slot, item) for slot, item in failing)


def first_overflow(graph: Graph) -> Optional[Node]:
    """Earliest node in execution order (dump.json completion order, not the most severe level) whose inputs are
    finite and an output is Inf/NaN. That is exactly the "critical" scene of overflow_level: "high" means inf/nan
    on both sides or a finite output norm ratio > 100, "medium" bad inputs only - neither is where an overflow
    starts. Levels are only graded with -oc, so without it there is no first overflow. Of the critical nodes it
    skips one whose non-finite outputs are the kinds a non-finite non-tensor argument supplies (a causal mask's
    masked_fill(mask, -inf)), and one whose counterpart's outputs are non-finite in the same way (same kinds,
    same nan/inf counts per output): neither is where the debug run's overflow starts. Their levels stay."""
    from tbprobe.graph_builder.overflow import non_finite_kinds, output_pattern

    for node in _leaves_in_exec_order(graph):
        if node.overflow != FINITE_IN_BAD_OUT:
            continue
        entry = node.entry if node.has_entry else None
        args, outs = non_finite_kinds(node.name, entry)
        if outs and all(k in args or (k == "inf" and args & {"+inf", "-inf"}) for k in outs):
            continue
        bench = node.match
        if bench is not None and bench.has_entry:
            pattern = output_pattern(node.name, entry)
            if pattern and pattern == output_pattern(bench.name, bench.entry):
                continue
        return node
    return None


def nonfinite_enters(nodes: Iterable[Node]) -> Optional[Node]:
    """Where Inf/NaN first appears when no node is where an overflow starts (first_overflow is None): of `nodes`
    (the graph's nodes with an overflow level, API collections aside, in execution order), the earliest one holding
    an Inf/NaN, when that Inf/NaN is in its tensor inputs, i.e. a call the dump does not record made it (a
    GradScaler run: the loss gradient, finite in float32, cast to float16 inside autocast's backward, where it is
    past 65504). None when the earliest Inf/NaN is in an output (a critical node first_overflow skipped: a
    masked_fill(mask, -inf), the bench's own overflow; a peer's data that a recv brought), when the counterpart's
    inputs are non-finite in the same way (the bench has it too), and for nodes whose level is a norm jump alone.
    Before, such a step said "first overflow: none" and the Overflow page "each had Inf/NaN coming in", without
    a word of where it came in."""
    from tbprobe.graph_builder.overflow import input_pattern, non_finite_io

    for node in nodes:
        if ".parameters_grad" in node.name or node.node_type == NODE_API_COLLECTION:
            continue   # (a module's gradients: the backward call that made them is the node; a collection's calls)
        entry = node.entry if node.has_entry else None
        in_bad, out_bad = non_finite_io(node.name, entry)
        if not in_bad:
            if out_bad:
                return None
            continue
        bench = node.match
        if bench is not None and bench.has_entry:
            pattern = input_pattern(node.name, entry)
            if pattern and pattern == input_pattern(bench.name, bench.entry):
                return None
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


def findings_rows(graph: Graph, mode: Optional[str] = None) -> Tuple[List[tuple], Dict[str, object]]:
    """Rows for tbprobe_findings (graph_id, kind, node_name, exec_order, detail) and a summary dict."""
    rows = []
    summary: Dict[str, object] = {"first_divergence": None, "first_overflow": None,
                                  "first_divergence_order": None, "first_overflow_order": None,
                                  "nonfinite_enters": None, "nonfinite_enters_order": None}
    div, rule = _first_divergence(graph, mode)
    if div is not None:
        # (rule, flagged, worst_output and enters: why it was chosen, for the plugin to say; files written before
        # them lack them)
        detail = {"precision_index": div.precision, "path": div.path(), "traced_from": trace_back(graph, div),
                  "matched": div.match.name if div.match is not None else None,
                  "rule": rule, "flagged": div.precision == 1,
                  "warning_only": is_warning_only(div, rule, graph.task),
                  "worst_output": _worst_output(div, mode or graph.task),
                  "enters": _entering(graph, div, mode or graph.task) if rule == RULE_DIFFERENCE_ENTERS else []}
        # (no node of the graph flagged: a weight differs where it was chosen, below every rule's bound)
        summary["first_divergence_weight"] = rule == RULE_DIFFERENCE_ENTERS and not div.precision and \
            not _past_bound(div, graph.task)
        rows.append((graph.graph_id, "first_divergence", div.name, div.exec_order, json.dumps(detail)))
        summary["first_divergence"], summary["first_divergence_order"] = div.name, div.exec_order
        summary["first_divergence_warning_only"] = detail["warning_only"]
        # (the module an operator ran in: the summary line names it, as a user looks for the layer first)
        summary["first_divergence_in"] = next((p for p in reversed(detail["path"][:-1]) if p.startswith("Module.")),
                                               None) if not div.name.startswith("Module.") else None
    ovf = first_overflow(graph)
    if ovf is not None:
        detail = {"overflow_level": ovf.overflow, "path": ovf.path()}
        rows.append((graph.graph_id, "first_overflow", ovf.name, ovf.exec_order, json.dumps(detail)))
        summary["first_overflow"], summary["first_overflow_order"] = ovf.name, ovf.exec_order
    else:
        enters = nonfinite_enters(n for n in _leaves_in_exec_order(graph) if n.overflow)
        if enters is not None:
            summary["nonfinite_enters"], summary["nonfinite_enters_order"] = enters.name, enters.exec_order
    return rows, summary


def _worst_output(node: Node, task: str) -> Optional[Dict[str, object]]:
    """The node's worst output figure first_divergence judged it by: {"metric": "NormRelativeErr", "value": in
    percent, as the rows write it} (statistics) or {"metric": "Cosine", "value": the lowest} (tensor); None
    without one."""
    if node.worst_metric is None:
        return None
    if task == "tensor":
        return {"metric": "Cosine", "value": round(1.0 - node.worst_metric, 6)}
    return {"metric": "NormRelativeErr", "value": round(100.0 * node.worst_metric, 6)}


def _entering(graph: Graph, node: Node, mode: str) -> List[Dict[str, str]]:
    """The failing inputs of a node chosen because the difference enters there: [{"slot", "kind"}], kind
    "argument" (a non-tensor argument) or "leaf" (a tensor no recorded call made that trains: a weight passed as
    an argument)."""
    if node.match is None:
        return []
    from tbprobe.graph_builder.compare import failing_inputs
    from tbprobe.graph_builder.items import is_tensor_item

    failing = failing_inputs(node.name, node.entry if node.has_entry else None, node.match.name,
                             node.match.entry if node.match.has_entry else None, mode, graph.strict_dtype)
    if not failing:   # (chosen for a weight a few percent off, below the inputs' 10 % bound)
        return [{"slot": slot, "kind": "leaf"} for slot, _ in _differing_weights(graph, node)]
    return [{"slot": slot, "kind": "leaf" if is_tensor_item(item) else "argument"} for slot, item in failing]
