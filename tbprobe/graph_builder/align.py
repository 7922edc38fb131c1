"""The keys nodes are aligned by, and aligning two child lists by structure and order.

A call counter says how many calls of that API (or module) came before in the whole step, so one extra call shifts
the counters of every later call of the same name, here and elsewhere in the tree: `Tensor.reshape.3` on one side
is `Tensor.reshape.2` on the other. The lists of children under a matched pair are therefore aligned like a diff
of (name without counters, direction, input dtypes and shapes); a group of top-level calls
(`Apis_Between_Modules.N`, numbered in order, so shifted by one extra group) is keyed by the calls it holds.
Pairs whose names and keys already agree are kept unless following a shift pairs more children (align_children).
"""
import difflib
import re
from collections import Counter
from typing import List, Optional, Sequence, Tuple

from tbprobe.graph_builder.diff import DIFF_LIMIT, diff_pairs, in_order
from tbprobe.graph_builder.items import flatten_entry, is_tensor_item
from tbprobe.graph_builder.model import Node

__all__ = ["MODULE_NAME", "align_children", "link", "same_inputs", "signature", "similar_groups",
           "strip_counters"]

_API = re.compile(r"^(.*)\.\d+\.(forward|backward)$")
MODULE_NAME = re.compile(r"^(.*)\.(forward|backward)\.\d+$")
_GRAD = re.compile(r"^(.*)\.parameters_grad(\.\d+)?$")
_ABM = re.compile(r"^Apis_Between_Modules\.\d+$")
_GROUP = "Apis_Between_Modules"
# groups of top-level calls pair by number only where at least this share of their calls are the same ones
_GROUP_SIMILARITY = 0.5


def strip_counters(name: str) -> Tuple[str, str]:
    """(name without call counters, direction) for APIs, modules and parameter grads."""
    m = _API.match(name)
    if m and not name.startswith(("Module.", "Cell.")):
        return m.group(1), m.group(2)
    m = MODULE_NAME.match(name)
    if m:
        return m.group(1), m.group(2)
    m = _GRAD.match(name)
    if m:
        return m.group(1) + ".parameters_grad", "backward"
    if _ABM.match(name):
        return _GROUP, ""
    return name, ""


_BATCH_P2P = "Distributed.batch_isend_irecv."


def _sends_only(entry: dict) -> dict:
    """A batch_isend_irecv entry without its irecv ops' tensors. Before the call such a tensor is whatever the
    receive buffer held: msprobe records it, tbprobe records nothing, so the two tools' records of one batch had
    different input shapes and the aligner kept them apart. What the irecv received is in the output."""
    args = entry.get("input_args")
    if not (isinstance(args, list) and args and isinstance(args[0], list)):
        return entry
    sends = [op for op in args[0] if not (isinstance(op, dict) and op.get("op") == "irecv")]
    return {**entry, "input_args": [sends, *args[1:]]}


def _input_shapes(node: Node) -> tuple:
    """(dtype, shape) of each tensor input, computed once per node (one decode of its entry)."""
    sig = node.sig
    if sig is None:
        out = []
        entry = node.entry
        if entry and node.name.startswith(_BATCH_P2P):
            entry = _sends_only(entry)
        if entry:
            ins, _ = flatten_entry(node.name, entry)
            for _, item in ins:
                if is_tensor_item(item):
                    out.append((item.get("dtype"), tuple(item.get("shape") or ())))
        sig = node.sig = tuple(out)
    return sig


def signature(node: Node) -> tuple:
    base, direction = strip_counters(node.name)
    return (base, direction, _input_shapes(node))


def same_inputs(a: Node, b: Node) -> bool:
    return _input_shapes(a) == _input_shapes(b)


def link(d: Node, b: Node, how: Optional[str] = None) -> None:
    d.match = b
    b.match = d
    if how:
        d.add_flag(how)


def _is_group(node: Node) -> bool:
    return bool(_ABM.match(node.name))


def similar_groups(a: Node, b: Node) -> bool:
    """False for two groups of top-level calls that share less than half their calls (by name without counters):
    the same number on both sides is then a shifted one (an extra group before it), not the same group."""
    if not (_is_group(a) and _is_group(b)):
        return True
    left = [strip_counters(c.name) for c in a.children]
    right = [strip_counters(c.name) for c in b.children]
    if not left and not right:
        return True
    if len(left) * len(right) > DIFF_LIMIT:
        # difflib's ratio is quadratic on long repetitive groups; the shared multiset is linear and bounds it
        shared = sum((Counter(left) & Counter(right)).values())
        return 2.0 * shared / (len(left) + len(right)) >= _GROUP_SIMILARITY
    return difflib.SequenceMatcher(None, left, right, autojunk=False).ratio() >= _GROUP_SIMILARITY


def _key(node: Node) -> tuple:
    if _is_group(node):
        return (_GROUP, "", tuple(signature(c) for c in node.children))
    return signature(node)


def align_children(debug_children: Sequence[Node], bench_children: Sequence[Node]) -> None:
    """Pair the unmatched children of two lists whose keys agree, in order. Two alignments are made: a diff of
    the keys alone, and one that keeps every pair whose names and keys both agree (the exact pass's pairs) and
    diffs only what lies between them. The one pairing more children wins; a tie keeps the names: with a real
    shape difference in debug `matmul.0` and one extra bench call, the key diff alone paired debug `matmul.1`
    with the bench's `matmul.0` (the first equal key) and left the healthy `matmul.1` pair apart. A pair whose
    names differ (a shifted counter) is flagged `aligned`."""
    left: List[Node] = [c for c in debug_children if c.match is None]
    right: List[Node] = [c for c in bench_children if c.match is None]
    if not left or not right:
        return
    keys_l = [_key(c) for c in left]
    keys_r = [_key(c) for c in right]
    by_keys = diff_pairs(keys_l, keys_r)
    by_names = _name_anchored_pairs(left, right, keys_l, keys_r)
    for i, j in by_keys if len(by_keys) > len(by_names) else by_names:
        x, y = left[i], right[j]
        link(x, y, None if x.name == y.name else "aligned")


def _name_anchored_pairs(left: Sequence[Node], right: Sequence[Node], keys_l: Sequence, keys_r: Sequence
                         ) -> List[Tuple[int, int]]:
    """Every (i, j) whose names and keys agree, plus a diff of the other children within the gaps between
    those pairs that are in order on both sides (so no diff pair crosses one)."""
    where = {c.name: j for j, c in enumerate(right)}
    anchors = []
    for i, c in enumerate(left):
        j = where.get(c.name)
        if j is not None and keys_l[i] == keys_r[j]:
            anchors.append((i, j))
    if not anchors:
        return []
    taken_l = {i for i, _ in anchors}
    taken_r = {j for _, j in anchors}
    pairs = list(anchors)
    prev_i = prev_j = -1
    for i, j in in_order(anchors) + [(len(left), len(right))]:
        gap_l = [k for k in range(prev_i + 1, i) if k not in taken_l]
        gap_r = [k for k in range(prev_j + 1, j) if k not in taken_r]
        if gap_l and gap_r:
            pairs += [(gap_l[a], gap_r[b]) for a, b in diff_pairs([keys_l[k] for k in gap_l],
                                                                   [keys_r[k] for k in gap_r])]
        prev_i, prev_j = i, j
    return pairs
