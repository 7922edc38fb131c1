"""One graph (a step x rank x side of a file) held compactly in memory: names, tree, colours, roll-ups.

Built once per graph from a single scan of its rows and cached by the store (keyed by the file's identity), it
answers children, paths, filters and search without touching SQLite again. Nodes are numbered by ``node_order``
(post-order, siblings in execution order), so a node's children are listed in execution order.
"""
import math
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.search_index import NameSearch

__all__ = ["OVERFLOW_LEVELS", "PRECISION_CLASSES", "NodeRow", "GraphIndex", "precision_class", "precision_classes",
           "stored_int", "int_sql"]

OVERFLOW_LEVELS = ("", "medium", "high", "critical")
_OVERFLOW_CODE = {name: code for code, name in enumerate(OVERFLOW_LEVELS)}
_NAN = float("nan")
# Python objects per node besides the name's characters: the str objects, list slots, the name map's entry, the
# search's offsets (measured: two 100k-node sides took about 125 MB)
_NODE_OVERHEAD = 500

# (name, node_type, up_node, precision_index, overflow_level, micro_step_id, matched, exec_order)
NodeRow = Tuple[str, object, Optional[str], Optional[float], Optional[str], Optional[int], bool, Optional[int]]

# The reference's default legend: [0, 0.3) pass, [0.3, 0.6) warning, [0.6, 1] error, no value = unmatched.
_DEFAULT_BOUNDS = ((0.3, "pass"), (0.6, "warning"), (math.inf, "error"))


def precision_class(value: float, bounds: Sequence[Tuple[float, str]] = _DEFAULT_BOUNDS) -> str:
    if value != value:  # NaN: no precision (unmatched or no data)
        return "unmatched"
    for upper, name in bounds:
        if value < upper:
            return name
    return bounds[-1][1]


PRECISION_CLASSES = ("pass", "warning", "error", "unmatched")


def precision_classes(values: np.ndarray, bounds: Sequence[Tuple[float, str]] = _DEFAULT_BOUNDS) -> np.ndarray:
    """Vectorised :func:`precision_class`: codes into PRECISION_CLASSES (pass 0, warning 1, error 2, unmatched 3)."""
    out = np.full(len(values), PRECISION_CLASSES.index(bounds[-1][1]), dtype=np.int8)
    assigned = np.isnan(values)
    out[assigned] = 3
    for upper, name in bounds:
        here = ~assigned & (values < upper)
        out[here] = PRECISION_CLASSES.index(name)
        assigned |= here
    return out


_ASCII_INT = re.compile(r"-?[0-9]+")   # (int() also took " 1", "1_0" and other scripts' digits, "\u0661")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _shown(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"a {len(bytes(value))}-byte blob"
    if isinstance(value, str):
        return quoted(value, 40)
    return str(value)[:40]


def stored_int(value: object, source: str, column: str, node: str, lo: int = _INT64[0], hi: int = _INT64[1],
               default: int = 0) -> int:
    """A stored integer (a JSON or SQLite integer, or text of ASCII digits with an optional minus) as an int, between
    ``lo`` and ``hi``; ``default`` for NULL or ''. Anything else (``'abc'``, ``1.5``, a blob, a number too big) is a
    400 naming the file, the column and the node: int() on such a value was a 500 on every route that read it."""
    if value is None or value == "":
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _ASCII_INT.fullmatch(value):
        number = int(value)
    else:
        raise ApiError(400, f"{source}: column {column} of node {quoted(node)} holds {_shown(value)}, not an integer")
    if not lo <= number <= hi:
        raise ApiError(400, f"{source}: column {column} of node {quoted(node)} holds {_shown(value)}, not an "
                            f"integer from {lo} to {hi}")
    return number


def int_sql(column: str) -> str:
    """SQL giving a stored integer column as an integer when it is one (an integer, or text of at most 18 ASCII
    digits, as msprobe's TEXT node_type holds it), else the value as stored, for :func:`stored_int` to refuse or
    read (CAST turned 'abc' into 0 and 1.5 into 1 silently, while the node's details failed on it)."""
    return (f"CASE WHEN typeof({column}) = 'integer' THEN {column}"
            f" WHEN typeof({column}) = 'text' AND length({column}) BETWEEN 1 AND 18 AND {column} NOT GLOB '*[^0-9]*'"
            f" THEN CAST({column} AS INTEGER) ELSE {column} END")


def _int_column(values: Sequence[object], dtype, column: str, names: Sequence[str], source: str,
                default: int = 0) -> np.ndarray:
    """A column of stored integers as an array of ``dtype``: at once when every value is an integer in range (the
    store's SQL gives those), else value by value, a bad one a 400 naming it (:func:`stored_int`)."""
    info = np.iinfo(dtype)
    try:
        found = np.array(values)
    except (TypeError, ValueError, OverflowError):
        found = None
    if found is not None and found.ndim == 1 and found.dtype.kind in "iu" and (
            not len(found) or (int(found.min()) >= info.min and int(found.max()) <= info.max)):
        return found.astype(dtype)
    return np.array([stored_int(v, source, column, names[i], int(info.min), int(info.max), default)
                     for i, v in enumerate(values)], dtype=dtype)


def _float_array(values) -> np.ndarray:
    try:
        return np.array([_NAN if v is None or v == "" else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_float(v) for v in values], dtype=np.float64)


def _float(value: object) -> float:
    if value is None or value == "":
        return _NAN
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return _NAN


def _check_names(names: Sequence[object], ups: Sequence[object], source: str) -> None:
    """400 for a node name that is not text (NULL, a blob, a number) or a parent that is neither text nor empty:
    joining them for the search was a 500 on every route of the graph."""
    if set(map(type, names)) <= {str} and set(map(type, ups)) <= {str, type(None)}:
        return  # (the usual case, checked at C speed)
    for i, (name, up) in enumerate(zip(names, ups)):
        if not isinstance(name, str):
            raise ApiError(400, f"{source}: column node_name of the node at position {i} holds "
                                f"{'NULL' if name is None else _shown(name)}, not a name")
        if up is not None and not isinstance(up, str):
            raise ApiError(400, f"{source}: column up_node of node {quoted(name)} holds {_shown(up)}, not a name")


def _attach_cycles(parent: np.ndarray, root: int) -> None:
    """Hang under the root each parent cycle of a damaged file (A's parent B, B's parent A), one node of each:
    nothing led to them from the root, so they and their subtrees vanished from every view without a word."""
    n = len(parent)
    if bool(np.all((parent > np.arange(n)) | (parent < 0))):
        return  # (post-order, as both tools write it: every chain of parents climbs to the root)
    state = bytearray(n)   # 0 not seen, 1 on the current walk up, 2 leads to the root
    state[root] = 2
    par = parent.tolist()
    for start in range(n):
        walk = []
        i = start
        while state[i] == 0:
            state[i] = 1
            walk.append(i)
            i = par[i]
        if state[i] == 1:   # the walk came back to itself: a cycle, attached where it closed
            parent[i] = par[i] = root
        for j in walk:
            state[j] = 2


class GraphIndex:
    """The tree of one graph. Index ``i`` is the i-th node by node_order; the root is ``self.root``. ``source``
    names the file in the 400 a wrongly typed value gets (``node_type``, ``micro_step_id``, ``exec_order``, and
    the stored findings' ``exec_order``)."""

    source: str

    def __init__(self, rows: Sequence[NodeRow], compare: bool, source: str = "this graph"):
        self.compare = compare
        self.source = source
        n = len(rows)
        if n == 0:
            raise ApiError(404, "this graph has no nodes")
        # Column-wise bulk conversion: a Python loop per node and field would dominate the cost of a big graph.
        # The store hands over types, micro steps and flags already as integers and overflow as a code (SQL does
        # the conversion, int_sql); other sources may pass text, converted (or refused) on the slow path.
        names, ntypes, ups, precs, ovfs, micros, matched, execs = zip(*rows)
        _check_names(names, ups, source)
        self.names: List[str] = list(names)
        self.types = _int_column(ntypes, np.int16, "node_type", names, source)
        self.precision = _float_array(precs)
        self.overflow = np.array([o if isinstance(o, int) and 0 <= o < len(OVERFLOW_LEVELS)
                                  else _OVERFLOW_CODE.get(o if isinstance(o, str) else "", 0) for o in ovfs],
                                 dtype=np.int8)
        self.micro = _int_column(micros, np.int32, "micro_step_id", names, source)
        self.matched = np.array(matched, dtype=bool)
        self.exec_order = _int_column([i if e is None else e for i, e in enumerate(execs)], np.int64, "exec_order",
                                      names, source)
        # First occurrence wins for a duplicated name (dict() keeps the last: feed the names in reverse).
        self.by_name: Dict[str, int] = dict(zip(reversed(self.names), range(n - 1, -1, -1)))
        get = self.by_name.get
        parent = np.array([-1 if not up else get(up, -2) for up in ups], dtype=np.int64)
        roots = np.flatnonzero(parent == -1)
        # The root is the last parentless node in post-order (DefaultModel); other parentless nodes and orphans
        # whose parent is missing hang under it, so no subtree vanishes.
        self.root = int(roots[-1]) if len(roots) else n - 1
        parent[(parent < 0) | (parent == np.arange(n))] = self.root
        parent[self.root] = -1
        _attach_cycles(parent, self.root)
        self.parent = parent
        self._build_children(n)
        self._roll_up(n)
        self.search = NameSearch(self.names)

    def _build_children(self, n: int) -> None:
        has_parent = self.parent >= 0
        counts = np.bincount(self.parent[has_parent], minlength=n)
        self.child_start = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        # A stable sort by parent keeps siblings in node_order (execution order).
        order = np.argsort(self.parent, kind="stable")
        self.child_list = order[np.count_nonzero(~has_parent):]

    def _roll_up(self, n: int) -> None:
        """Worst precision and overflow of each subtree. In a well-formed file parents come after their children
        (post-order) and one ascending pass suffices; otherwise walk from the leaves of a breadth-first order."""
        parent = self.parent
        if bool(np.all((parent > np.arange(n)) | (parent < 0))):
            order = range(n)
        else:
            order = reversed(self._bfs_order())
        sub_p = self.precision.tolist()
        sub_o = self.overflow.tolist()
        par = parent.tolist()
        for i in order:
            p = par[i]
            if p < 0:
                continue
            v = sub_p[i]
            if v == v and not (sub_p[p] >= v):
                sub_p[p] = v
            if sub_o[i] > sub_o[p]:
                sub_o[p] = sub_o[i]
        self.subtree_precision = np.array(sub_p, dtype=np.float64)
        self.subtree_overflow = np.array(sub_o, dtype=np.int8)

    def _bfs_order(self) -> List[int]:
        order = [self.root]
        seen = bytearray(len(self.names))
        seen[self.root] = 1
        k = 0
        while k < len(order):  # nodes caught in a parent cycle (corrupt file) are never reached: roll-ups stay finite
            i = order[k]
            k += 1
            for c in self.child_list[self.child_start[i]: self.child_start[i + 1]].tolist():
                if not seen[c]:
                    seen[c] = 1
                    order.append(c)
        return order

    # --- queries -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def memory_estimate(self) -> int:
        """About how many bytes this index holds: its arrays, and per node its name (held by the list, the name
        map and the search's lowered text) and the Python objects around it."""
        found = getattr(self, "_memory", None)
        if found is None:
            arrays = sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))
            found = arrays + sum(2 * len(n) for n in self.names) + _NODE_OVERHEAD * len(self.names)
            self._memory = found
        return found

    def find(self, name: str) -> int:
        i = self.by_name.get(name)
        if i is None:
            raise ApiError(404, f"no node named {quoted(name)} in this graph")
        return i

    def children(self, i: int, micro_step: int = -1) -> List[int]:
        kids = self.child_list[self.child_start[i]: self.child_start[i + 1]]
        if micro_step >= 0:
            kids = kids[self.micro[kids] == micro_step]
        return kids.tolist()

    def n_children(self, i: int) -> int:
        return int(self.child_start[i + 1] - self.child_start[i])

    def path(self, i: int) -> List[str]:
        out = []
        guard = 0
        while i >= 0 and guard <= len(self.names):
            out.append(self.names[i])
            i = int(self.parent[i])
            guard += 1
        return out[::-1]

    def summary(self, i: int, overlay: Optional[Dict[str, dict]] = None) -> dict:
        prec = float(self.precision[i])
        sp = float(self.subtree_precision[i])
        out = {
            "name": self.names[i],
            "type": int(self.types[i]),
            "n_children": self.n_children(i),
            "precision": None if prec != prec else prec,
            "overflow": OVERFLOW_LEVELS[self.overflow[i]] or None,
            "subtree_precision": None if sp != sp else sp,
            "subtree_overflow": OVERFLOW_LEVELS[self.subtree_overflow[i]] or None,
            "matched": bool(self.matched[i]),
            "micro_step": int(self.micro[i]),
            "order": i,
        }
        if overlay and self.names[i] in overlay:
            fields = overlay[self.names[i]]
            out.update(fields)
            # A manual match changes this node's own result; its subtree's worst includes it (ancestors keep the
            # stored roll-up until the edits are applied to the database).
            if fields.get("precision") is not None:
                sp = out["subtree_precision"]
                out["subtree_precision"] = fields["precision"] if sp is None else max(sp, fields["precision"])
        return out
