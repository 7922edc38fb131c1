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
    # (graded as the build graded the file: with its --strict-dtype a bf16 vs fp32 pair is an error, not a note)
    strict = bool(graph_file.meta().get("strict_dtype"))
    try:
        result = compare_nodes(d_row, b_row, task, strict_dtype=strict)  # (precision_index, input_data, output_data)
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
    """Effective matches of one step x rank: stored links, minus the user's unmatches, plus the user's matches.

    Each node has at most one effective counterpart, the same seen from either side: a manual match takes its
    bench node away from the debug node stored with it, and the debug node's stored bench partner is left with none.
    """

    def __init__(self, graph_file, step: int, rank: int, matches: Dict[str, str], unmatched: List[str], task: str):
        self.matches = matches
        self.unmatched = set(unmatched) - set(matches)
        # bench -> debug; side files written before matches displaced each other may name one bench twice:
        # the later match holds it
        self.claimed = {b: d for d, b in matches.items()}
        self.file, self.task = graph_file, task
        self._step, self._rank = step, rank
        self._stored_links: Dict[Tuple[str, str], Optional[str]] = {}

    def stored_counterpart(self, debug: str) -> Optional[str]:
        return self._stored("NPU", debug)

    def stored_debug(self, bench: str) -> Optional[str]:
        return self._stored("Bench", bench)

    def _stored(self, side: str, name: str) -> Optional[str]:
        # touched() asks for most names two or three times, and each ask reads a whole row
        key = (side, name)
        if key not in self._stored_links:
            try:
                link = self.file.node(self._step, self._rank, side, name).get("matched_node_link") or []
            except ApiError:
                link = []
            self._stored_links[key] = str(link[-1]) if link else None
        return self._stored_links[key]

    def debug_peer(self, debug: str, stored: Optional[str]) -> Optional[str]:
        """The bench counterpart of a debug node whose stored one is ``stored``."""
        if debug in self.matches:
            bench = self.matches[debug]
            return bench if self.claimed[bench] == debug else None
        if debug in self.unmatched or stored in self.claimed:
            return None
        return stored

    def bench_peer(self, bench: str, stored: Optional[str]) -> Optional[str]:
        """The debug counterpart of a bench node whose stored one is ``stored``."""
        if bench in self.claimed:
            return self.claimed[bench]
        if stored in self.unmatched or stored in self.matches:
            return None
        return stored

    def counterpart(self, side: str, name: str, stored: Optional[str]) -> Optional[str]:
        return self.debug_peer(name, stored) if side == "NPU" else self.bench_peer(name, stored)

    def touched(self, side: str) -> Dict[str, Optional[str]]:
        """Every node of one side whose counterpart the edits may change -> its effective counterpart."""
        if side == "NPU":
            names = set(self.matches) | self.unmatched
            names.update(d for d in map(self.stored_debug, self.claimed) if d)
            return {d: self.debug_peer(d, self.stored_counterpart(d)) for d in names}
        names = set(self.claimed)
        names.update(b for b in map(self.stored_counterpart, set(self.matches) | self.unmatched) if b)
        return {b: self.bench_peer(b, self.stored_debug(b)) for b in names}

    def is_manual(self, side: str, name: str) -> bool:
        return name in (self.matches if side == "NPU" else self.claimed)

    def for_side(self, side: str) -> Dict[str, dict]:
        """node name -> fields that replace the stored ones in a NodeSummary."""
        out: Dict[str, dict] = {}
        for name, peer in self.touched(side).items():
            manual = self.is_manual(side, name)
            if peer is None:
                out[name] = {"matched": False, "manual": True}
                if side == "NPU":
                    out[name]["precision"] = None
            elif manual:
                out[name] = {"matched": True, "manual": True}
                if side == "NPU":
                    out[name]["precision"] = recompute_precision(self.file, self._step, self._rank, name, peer,
                                                                 self.task)
        return out
