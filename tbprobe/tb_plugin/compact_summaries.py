"""The compact form of a list of node summaries: one array per field instead of one object per node.

A 20k-children expand as objects is ~4 MB of JSON that the browser must parse into 20k objects with ten keys
each; as arrays it is about a quarter of that, parsed into a dozen arrays. A field every node has at its default
is left out (``precision`` all null, ``overflow`` all none, ``matched`` all true, ``micro_step`` all 0, no manual
edit), so the common case carries only names, types, child counts and orders (docs/http_api.md, ``compact=1``).
"""
from typing import Dict, List, Optional, Sequence

import numpy as np

from tbprobe.tb_plugin.graph_index import OVERFLOW_LEVELS, GraphIndex

__all__ = ["compact_summaries", "compact_from_dicts"]


def _nullable(values: np.ndarray) -> Optional[list]:
    """Floats with NaN as null; None when every value is NaN (the field is left out)."""
    nan = np.isnan(values)
    if nan.all():
        return None
    out = values.tolist()
    if nan.any():
        for i in np.flatnonzero(nan).tolist():
            out[i] = None
    return out


def _levels(codes: np.ndarray) -> Optional[list]:
    """Overflow codes (0 none, 1 medium, 2 high, 3 critical); None when all are 0."""
    return codes.tolist() if codes.any() else None


def compact_summaries(idx: GraphIndex, kids: Sequence[int], overlay: Optional[Dict[str, dict]] = None) -> dict:
    """Columns of ``idx.summary(i, overlay)`` for every i in ``kids``, defaults left out."""
    k = np.asarray(kids, dtype=np.int64)
    names: List[str] = [idx.names[i] for i in kids]
    counts = idx.child_start[k + 1] - idx.child_start[k] if len(k) else np.zeros(0, dtype=np.int64)
    precision = idx.precision[k].copy()
    subtree_precision = idx.subtree_precision[k].copy()
    overflow = idx.overflow[k].copy()
    subtree_overflow = idx.subtree_overflow[k].copy()
    matched = idx.matched[k].copy()
    manual: List[int] = []
    if overlay:
        # Side-file edits (few) override stored fields; the same rule as GraphIndex.summary.
        for pos, name in enumerate(names):
            fields = overlay.get(name)
            if not fields:
                continue
            manual.append(pos)
            if "precision" in fields:
                p = fields["precision"]
                precision[pos] = np.nan if p is None else p
                if p is not None:
                    sp = subtree_precision[pos]
                    subtree_precision[pos] = p if sp != sp else max(sp, p)
            if "matched" in fields:
                matched[pos] = bool(fields["matched"])
            if fields.get("overflow") in OVERFLOW_LEVELS:
                overflow[pos] = OVERFLOW_LEVELS.index(fields["overflow"])
    out = {
        "name": names,
        "type": idx.types[k].tolist(),
        "n_children": counts.tolist(),
        "order": k.tolist(),
    }
    optional = {
        "precision": _nullable(precision),
        "subtree_precision": _nullable(subtree_precision),
        "overflow": _levels(overflow),
        "subtree_overflow": _levels(subtree_overflow),
        "matched": None if matched.all() else matched.astype(np.int8).tolist(),
        "micro_step": idx.micro[k].tolist() if idx.micro[k].any() else None,
        "manual": manual or None,
    }
    out.update({key: value for key, value in optional.items() if value is not None})
    return out


def compact_from_dicts(items: Sequence[dict]) -> dict:
    """The compact form of summaries given as objects (the light first view of light_graph.py)."""
    levels = {name: code for code, name in enumerate(OVERFLOW_LEVELS)}
    out: Dict[str, list] = {key: [s[key] for s in items] for key in ("name", "type", "n_children", "order")}
    for key in ("precision", "subtree_precision"):
        values = [s[key] for s in items]
        if any(v is not None for v in values):
            out[key] = values
    for key in ("overflow", "subtree_overflow"):
        codes = [levels.get(s[key] or "", 0) for s in items]
        if any(codes):
            out[key] = codes
    if not all(s["matched"] for s in items):
        out["matched"] = [int(bool(s["matched"])) for s in items]
    if any(s["micro_step"] for s in items):
        out["micro_step"] = [s["micro_step"] for s in items]
    manual = [i for i, s in enumerate(items) if s.get("manual")]
    if manual:
        out["manual"] = manual
    return out
