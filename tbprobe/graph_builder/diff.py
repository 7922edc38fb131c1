"""A diff of two key lists whose cost stays bounded on long, repetitive lists.

difflib's SequenceMatcher costs up to len(a) * len(b) steps when keys repeat (an optimizer's thousands of `add_`
of one shape, a long group of top-level calls): 6,000 children took seconds, 20,000 minutes. Here the common head
and tail pair directly, a middle of at most DIFF_LIMIT (len * len) goes to difflib, and a larger one is anchored
on the keys found once on each side (a patience diff); each gap between anchors is diffed again the same way,
and a large gap without such keys pairs each key's k-th occurrence on both sides, kept in order.
"""
import bisect
import difflib
from typing import Dict, Hashable, List, Sequence, Tuple

__all__ = ["DIFF_LIMIT", "diff_pairs", "in_order"]

# len(a) * len(b) up to which difflib runs (about a second at worst in pure Python)
DIFF_LIMIT = 4_000_000


def diff_pairs(a: Sequence[Hashable], b: Sequence[Hashable]) -> List[Tuple[int, int]]:
    """Index pairs (i, j) with a[i] == b[j], increasing on both sides, sorted."""
    pairs: List[Tuple[int, int]] = []
    # (a from, a to, b from, b to, whether unique keys may still anchor it)
    todo = [(0, len(a), 0, len(b), True)]
    while todo:
        a0, a1, b0, b1, may_anchor = todo.pop()
        while a0 < a1 and b0 < b1 and a[a0] == b[b0]:
            pairs.append((a0, b0))
            a0, b0 = a0 + 1, b0 + 1
        while a0 < a1 and b0 < b1 and a[a1 - 1] == b[b1 - 1]:
            a1, b1 = a1 - 1, b1 - 1
            pairs.append((a1, b1))
        if a0 >= a1 or b0 >= b1:
            continue
        if (a1 - a0) * (b1 - b0) <= DIFF_LIMIT:
            sm = difflib.SequenceMatcher(None, a[a0:a1], b[b0:b1], autojunk=False)
            for block in sm.get_matching_blocks():
                pairs += [(a0 + block.a + k, b0 + block.b + k) for k in range(block.size)]
            continue
        anchors = in_order(_unique_pairs(a, a0, a1, b, b0, b1)) if may_anchor else []
        if not anchors:
            pairs += in_order(_occurrence_pairs(a, a0, a1, b, b0, b1))
            continue
        # one level of anchoring only: a gap is then diffed or paired by occurrence, so the cost stays bounded
        prev_i, prev_j = a0, b0
        for i, j in anchors:
            pairs.append((i, j))
            todo.append((prev_i, i, prev_j, j, False))
            prev_i, prev_j = i + 1, j + 1
        todo.append((prev_i, a1, prev_j, b1, False))
    pairs.sort()
    return pairs


def _unique_pairs(a: Sequence, a0: int, a1: int, b: Sequence, b0: int, b1: int) -> List[Tuple[int, int]]:
    """(i, j) of each key found exactly once in a[a0:a1] and once in b[b0:b1], by i."""
    count_a: Dict[Hashable, int] = {}
    for i in range(a0, a1):
        count_a[a[i]] = count_a.get(a[i], 0) + 1
    where_b: Dict[Hashable, int] = {}
    count_b: Dict[Hashable, int] = {}
    for j in range(b0, b1):
        count_b[b[j]] = count_b.get(b[j], 0) + 1
        where_b[b[j]] = j
    return [(i, where_b[a[i]]) for i in range(a0, a1) if count_a[a[i]] == 1 and count_b.get(a[i]) == 1]


def _occurrence_pairs(a: Sequence, a0: int, a1: int, b: Sequence, b0: int, b1: int) -> List[Tuple[int, int]]:
    """(i, j) pairing the k-th occurrence of each key in a[a0:a1] with its k-th in b[b0:b1], by i."""
    where_b: Dict[Hashable, List[int]] = {}
    for j in range(b0, b1):
        where_b.setdefault(b[j], []).append(j)
    seen: Dict[Hashable, int] = {}
    out = []
    for i in range(a0, a1):
        k = seen.get(a[i], 0)
        seen[a[i]] = k + 1
        options = where_b.get(a[i])
        if options is not None and k < len(options):
            out.append((i, options[k]))
    return out


def in_order(pairs: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The longest run of `pairs` (sorted by i, each i once) whose j increase too (n log n)."""
    tails: List[int] = []      # tails[k]: the smallest j ending a run of length k + 1
    tail_at: List[int] = []    # index in pairs of that pair
    back: List[int] = [-1] * len(pairs)
    for n, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_at.append(n)
        else:
            tails[k] = j
            tail_at[k] = n
        back[n] = tail_at[k - 1] if k else -1
    out = []
    n = tail_at[-1] if tail_at else -1
    while n >= 0:
        out.append(pairs[n])
        n = back[n]
    out.reverse()
    return out
