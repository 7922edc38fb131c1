"""The keys nodes are aligned by, and aligning two child lists by structure and order.

A call counter says how many calls of that API (or module) came before in the whole step, so one extra call shifts
the counters of every later call of the same name, here and elsewhere in the tree: `Tensor.reshape.3` on one side
is `Tensor.reshape.2` on the other. The lists of children under a matched pair are therefore aligned like a diff
of (name without counters, direction, input dtypes and shapes); a group of top-level calls
(`Apis_Between_Modules.N`, numbered in order, so shifted by one extra group) is keyed by the calls it holds.
"""
import difflib
import re
from typing import List, Optional, Sequence, Tuple

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


def _input_shapes(node: Node) -> tuple:
    """(dtype, shape) of each tensor input, computed once per node (one decode of its entry)."""
    sig = node.sig
    if sig is None:
        out = []
        entry = node.entry
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
    return difflib.SequenceMatcher(None, left, right, autojunk=False).ratio() >= _GROUP_SIMILARITY


def _key(node: Node) -> tuple:
    if _is_group(node):
        return (_GROUP, "", tuple(signature(c) for c in node.children))
    return signature(node)


def align_children(debug_children: Sequence[Node], bench_children: Sequence[Node]) -> None:
    """Pair the unmatched children of two lists whose keys agree, in order (difflib's matching blocks). A pair
    whose names differ (a shifted counter) is flagged `aligned`; one whose names agree is what the exact pass
    would pair, so it takes no flag."""
    left: List[Node] = [c for c in debug_children if c.match is None]
    right: List[Node] = [c for c in bench_children if c.match is None]
    if not left or not right:
        return
    keys_l = [_key(c) for c in left]
    keys_r = [_key(c) for c in right]
    # the common head and tail pair directly: the diff then only sees the part that differs (long, repetitive
    # lists such as an optimizer's thousands of add_ would make it quadratic)
    head = 0
    while head < min(len(left), len(right)) and keys_l[head] == keys_r[head]:
        head += 1
    tail = 0
    while tail < min(len(left), len(right)) - head and keys_l[-1 - tail] == keys_r[-1 - tail]:
        tail += 1
    pairs = [(left[i], right[i]) for i in range(head)]
    pairs += [(left[len(left) - 1 - i], right[len(right) - 1 - i]) for i in range(tail)]
    mid_l, mid_r = keys_l[head:len(left) - tail], keys_r[head:len(right) - tail]
    if mid_l and mid_r:
        sm = difflib.SequenceMatcher(None, mid_l, mid_r, autojunk=False)
        for block in sm.get_matching_blocks():
            pairs += [(left[head + block.a + k], right[head + block.b + k]) for k in range(block.size)]
    for x, y in pairs:
        link(x, y, None if x.name == y.name else "aligned")
