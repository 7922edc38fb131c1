"""Where a graph first goes wrong: the first divergence (earliest error, else warning, leaves first) and the first
overflow, in execution order. tbprobe's files store them (tbprobe_findings); for msprobe's files they are computed
from the stored results."""
from typing import Optional

import numpy as np

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


def first_overflow(idx: GraphIndex) -> Optional[dict]:
    """Where an overflow starts, as the graph builder finds it: the earliest critical node (finite inputs, an
    Inf/NaN output), leaves first; a high or medium one (Inf/NaN already coming in) only when none is critical."""
    leaves = _leaves(idx)
    best = None
    for mask in (idx.overflow == OVERFLOW_LEVELS.index("critical"), idx.overflow > 0):
        best = _earliest(idx, mask & leaves)
        best = best if best is not None else _earliest(idx, mask)
        if best is not None:
            break
    if best is None:
        return None
    return {"name": idx.names[best], "order": best, "exec_order": int(idx.exec_order[best]),
            "overflow": OVERFLOW_LEVELS[idx.overflow[best]], "path": idx.path(best)}
