"""Manual matching: the user's pairs (from the side files) laid over the stored matches, and the changes one
match or unmatch makes. Nothing here writes the database; side_files.py persists, apply.py writes on request.

Precision of a manually matched pair is recomputed through ``tbprobe.graph_builder.compare_nodes`` when the
graph builder provides it; otherwise the pair shows as matched with no precision.
"""
import threading
from typing import Dict, List, Optional, Tuple

from tbprobe.tb_plugin.api_error import ApiError
from tbprobe.tb_plugin.graph_index import GraphIndex

__all__ = ["Overlay", "pair_descendants", "recompute", "recompute_precision"]

_recompute_cache: Dict[tuple, tuple] = {}
_recompute_lock = threading.Lock()


def recompute_precision(graph_file, step: int, rank: int, debug: str, bench: str, task: str) -> Optional[float]:
    """precision_index of a manual pair, or None when the graph builder cannot say (or is not installed)."""
    return recompute(graph_file, step, rank, debug, bench, task)[0]


def recompute(graph_file, step: int, rank: int, debug: str, bench: str, task: str
              ) -> Tuple[Optional[float], Optional[dict], Optional[dict]]:
    """(precision_index, input_data, output_data) of the debug node of a manual pair, with the compare fields
    recomputed by the graph builder; (None, None, None) when it cannot say."""
    key = (id(graph_file), graph_file.path, step, rank, debug, bench)
    with _recompute_lock:
        if key in _recompute_cache:
            return _recompute_cache[key]
    try:
        from tbprobe.graph_builder import compare_nodes  # type: ignore[attr-defined]
    except ImportError:
        return None, None, None
    d_row = graph_file.node(step, rank, "NPU", debug)
    b_row = graph_file.node(step, rank, "Bench", bench)
    try:
        result = compare_nodes(d_row, b_row, task)  # (precision_index, input_data, output_data)
        prec, ind, outd = result if isinstance(result, tuple) else (result, None, None)
        value = (None if prec is None else float(prec), ind, outd)
    except Exception:  # noqa: BLE001 - a failed recompute must not break the page: show "no precision"
        value = (None, None, None)
    with _recompute_lock:
        if len(_recompute_cache) > 10000:
            _recompute_cache.clear()
        _recompute_cache[key] = value
    return value


def pair_descendants(npu: GraphIndex, bench: GraphIndex, d: int, b: int) -> List[Tuple[int, int]]:
    """(debug, bench) pairs for a node pair and its descendants: children paired in execution order while their
    types agree (the structure below two matched modules is usually the same, only the names differ)."""
    pairs = [(d, b)]
    k = 0
    while k < len(pairs):
        pd, pb = pairs[k]
        k += 1
        for cd, cb in zip(npu.children(pd), bench.children(pb)):
            if npu.types[cd] == bench.types[cb]:
                pairs.append((cd, cb))
        if len(pairs) > 200000:
            raise ApiError(400, "too many descendants to match at once")
    return pairs


class Overlay:
    """Effective matches of one step x rank: stored links, minus the user's unmatches, plus the user's matches."""

    def __init__(self, graph_file, step: int, rank: int, matches: Dict[str, str], unmatched: List[str], task: str):
        self.matches = matches
        self.unmatched = set(unmatched) - set(matches)
        self._file = graph_file
        self._step, self._rank, self._task = step, rank, task

    def stored_counterpart(self, debug: str) -> Optional[str]:
        try:
            link = self._file.node(self._step, self._rank, "NPU", debug).get("matched_node_link") or []
        except ApiError:
            return None
        return str(link[-1]) if link else None

    def for_side(self, side: str) -> Dict[str, dict]:
        """node name -> fields that replace the stored ones in a NodeSummary."""
        out: Dict[str, dict] = {}
        if side == "NPU":
            for d in self.unmatched:
                out[d] = {"matched": False, "precision": None, "manual": True}
            for d, b in self.matches.items():
                prec = recompute_precision(self._file, self._step, self._rank, d, b, self._task)
                out[d] = {"matched": True, "precision": prec, "manual": True}
        else:
            for d in self.unmatched:
                b = self.stored_counterpart(d)
                if b:
                    out[b] = {"matched": False, "manual": True}
            for b in self.matches.values():
                out[b] = {"matched": True, "manual": True}
        return out

    def counterpart(self, side: str, name: str, stored: Optional[str]) -> Optional[str]:
        if side == "NPU":
            if name in self.matches:
                return self.matches[name]
            return None if name in self.unmatched else stored
        for d, b in self.matches.items():
            if b == name:
                return d
        if stored is not None and stored in self.unmatched:
            return None
        return stored
