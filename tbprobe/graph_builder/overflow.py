"""Overflow levels (`-oc`, REFERENCE.md section 4), per API or module, from the dumped statistics.

First scene that applies: inputs finite and an output inf/nan -> critical; both -> high; an input inf/nan and the
outputs finite (or none) -> medium; max output Norm / max input Norm > 100 -> high. A collective that only moves
data (recv, broadcast, all_gather, ...) writes a peer's values: an inf/nan in its output is medium (it came in),
high with inf/nan inputs too, and no norm jump. Only tensor items count (a
scalar multiplier is not an input norm), and not a module's parameters. Bench nodes get their levels too;
parameters_grad nodes none (as in the reference).

A tensor is inf/nan when one of its values is: its Max or Min is not finite, or its nan/inf counts (tbprobe's
extra keys) say so. Not when only its Mean or Norm is: a float32 Norm overflows once |x| passes about 1.8e19, with
every value finite, which is the usual state of a tensor just before the operator that truly overflows; counting
it blamed that earlier operator as the first overflow (msprobe leaves Norm out too, and tbprobe leaves Mean, a
sum that can overflow the same way)."""
import math
from typing import Optional

from tbprobe.graph_builder.items import flatten_entry, is_tensor_item
from tbprobe.graph_builder.model import NODE_API_COLLECTION, Graph

__all__ = ["overflow_level", "mark_overflow", "LEVEL_RANK", "non_finite_kinds", "output_pattern", "input_pattern",
           "non_finite_io"]

LEVEL_RANK = {None: 0, "medium": 1, "high": 2, "critical": 3}
_VALUE_BOUNDS = ("Max", "Min")
_COUNTS = ("nan_count", "inf_count")


def _scan(items):
    bad = False
    norm = None
    for key, item in items:
        if not is_tensor_item(item) or ".parameters." in key:
            # (a module's parameters are not its inputs here, as the reference reads it: an Embedding whose
            # weight and output are NaN, its ids finite, is where the NaN comes out, critical, not high)
            continue
        for key in _VALUE_BOUNDS:
            v = item.get(key)
            if isinstance(v, float) and not math.isfinite(v):
                bad = True
        for key in _COUNTS:
            v = item.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                bad = True
        v = item.get("Norm")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v):
            norm = v if norm is None else max(norm, v)    # (an overflowed Norm, inf, is a jump past any ratio)
    return bad, norm


def overflow_level(name: str, entry: Optional[dict]) -> Optional[str]:
    if not entry or ".parameters_grad" in name:
        # (a module's parameter gradients are no call: their items read as inputs with no output, so NaN
        # gradients were "medium", NaN come in. The reference grades none; the backward call that made them has
        # its own level)
        return None
    ins, outs = flatten_entry(name, entry)
    in_bad, in_norm = _scan(ins)
    if not outs:
        # (a backward with no output, its inputs needing no gradient: NaN came in, none went out)
        return "medium" if in_bad else None
    out_bad, out_norm = _scan(outs)
    if _brings_peer_data(name):
        # the output is a peer's data: its "input" is this rank's buffer (or its own share). An inf/nan in it
        # came in from the peer, as into any call ("medium"), and a norm jump is the peer's numbers, not a jump
        return "high" if out_bad and in_bad else "medium" if out_bad or in_bad else None
    if out_bad and not in_bad:
        return "critical"
    if out_bad and in_bad:
        return "high"
    if in_bad:
        return "medium"
    if in_norm and out_norm is not None and in_norm > 0 and out_norm / in_norm > 100:
        return "high"
    return None


# collectives that only move data: what they write is values another rank sent, so they cannot make an inf. The
# reducing ones (all_reduce, reduce, reduce_scatter) add the ranks' values, and a sum of finite values can
# overflow there: they keep the general rule
_PEER_DATA_OPS = frozenset(("recv", "irecv", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base",
                            "all_gather_object", "gather", "scatter", "all_to_all", "all_to_all_single",
                            "broadcast_object_list", "recv_object_list", "scatter_object_list",
                            "gather_object", "batch_isend_irecv"))


def _brings_peer_data(name: str) -> bool:
    if not name.startswith("Distributed."):
        return False
    parts = name.split(".")
    return len(parts) >= 4 and parts[1] in _PEER_DATA_OPS


def mark_overflow(graph: Graph) -> None:
    for node in graph.nodes.values():
        if node.node_type != NODE_API_COLLECTION and node.entry:
            node.overflow = overflow_level(node.name, node.entry)


def _kinds_of_value(v) -> frozenset:
    if isinstance(v, float) and not math.isfinite(v):
        return frozenset(("nan",) if v != v else ("+inf",) if v > 0 else ("-inf",))
    return frozenset()


def _tensor_kinds(item: dict) -> frozenset:
    """The non-finite values a tensor item holds, as far as its statistics tell: NaN, +inf (its Max), -inf (its
    Min), or "inf" of unknown sign (an inf_count beside a NaN Max/Min)."""
    kinds = set(_kinds_of_value(item.get("Max"))) | set(_kinds_of_value(item.get("Min")))
    n = item.get("nan_count")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        kinds.add("nan")
    n = item.get("inf_count")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0 and not kinds & {"+inf", "-inf"}:
        kinds.add("inf")
    return frozenset(kinds)


def non_finite_kinds(name: str, entry: Optional[dict]):
    """(kinds of the non-finite non-tensor arguments, kinds of the non-finite output values) of an entry: a
    masked_fill(mask, -inf) has ({"-inf"}, {"-inf"})."""
    if not entry:
        return frozenset(), frozenset()
    ins, outs = flatten_entry(name, entry)
    args: set = set()
    for key, item in ins:
        if isinstance(item, dict) and not is_tensor_item(item) and ".parameters." not in key:
            args |= _kinds_of_value(item.get("value"))
    out: set = set()
    for _key, item in outs:
        if is_tensor_item(item):
            out |= _tensor_kinds(item)
    return frozenset(args), frozenset(out)


def output_pattern(name: str, entry: Optional[dict]) -> dict:
    """Per output slot (the key without the node name), its non-finite kinds and nan/inf counts: two sides whose
    patterns are equal overflow identically."""
    if not entry:
        return {}
    return _pattern(name, flatten_entry(name, entry)[1])


def input_pattern(name: str, entry: Optional[dict]) -> dict:
    """output_pattern for the tensor inputs (a module's parameters aside, as overflow_level reads them)."""
    if not entry:
        return {}
    return _pattern(name, [(key, item) for key, item in flatten_entry(name, entry)[0] if ".parameters." not in key])


def _pattern(name: str, items) -> dict:
    cut = len(name) + 1
    return {key[cut:]: (_tensor_kinds(item), item.get("nan_count"), item.get("inf_count"))
            for key, item in items if is_tensor_item(item)}


def non_finite_io(name: str, entry: Optional[dict]):
    """(a tensor input holds Inf/NaN, a tensor output does), by overflow_level's reading of the statistics."""
    if not entry:
        return False, False
    ins, outs = flatten_entry(name, entry)
    return _scan(ins)[0], _scan(outs)[0]
