"""The data layer behind the routes: each method answers one API call from plain arguments.

Stateless per request: everything is named by (run, file, step, rank, side, micro_step); the only state is the
read-only caches of graph_files.py and the side files the user asked to write.
"""
import os
import sqlite3
import threading
from typing import Dict, List, Optional

import numpy as np

from tbprobe.tb_plugin import catalog
from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.compact_summaries import compact_from_dicts, compact_summaries
from tbprobe.tb_plugin.compare_table import BASE_COLUMNS, build_rows, sort_key_number, to_csv
from tbprobe.tb_plugin.findings import (
    divergence_why,
    first_divergence,
    first_overflow,
    nonfinite_enters,
    stored_finding,
)
from tbprobe.tb_plugin.graph_files import GraphFiles
from tbprobe.tb_plugin.graph_index import (
    OVERFLOW_LEVELS,
    PRECISION_CLASSES,
    GraphIndex,
    precision_class,
    precision_classes,
)
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tbprobe.tb_plugin.manual_match import Overlay
from tbprobe.tb_plugin.node_detail import detail, split_params
from tbprobe.tb_plugin.side_files import SideFiles, matches_name
from tbprobe.tb_plugin.sqlite_ro import file_identity, open_readonly
from tbprobe.tb_plugin.stored_metrics import METRIC_FIELDS, MetricValue, metric_sort_key, row_metrics

__all__ = ["GraphData", "PRECISION_CLASSES"]

_PAGE_PARSE_LIMIT = 500
# How long the first view waits for a graph's index before answering lightly from SQLite: long enough for a
# small graph's index or a cached one to be ready (the answers are then complete), short beside a big build.
_FIRST_VIEW_WAIT_S = 0.15
# /api/path_children: at most so many children in one answer (all levels together); the levels past it are left
# out (the client asks /api/children for them)
PATH_CHILDREN_BUDGET = 200_000


class _LevelPages:
    """The levels of a /api/path_children or /api/depth_children answer: the first `limit` children of each node
    added, while PATH_CHILDREN_BUDGET children in all last (then `complete` is false and add() refuses)."""

    def __init__(self, idx, limit: int) -> None:
        self.idx, self.limit, self.budget = idx, limit, PATH_CHILDREN_BUDGET
        self.levels: List[dict] = []
        self.pages: List[int] = []
        self.complete = True

    def add(self, node: int, kids: List[int]) -> bool:
        page = kids[:self.limit]
        if len(page) > self.budget:
            self.complete = False
            return False
        self.budget -= len(page)
        self.levels.append({"node": self.idx.names[node], "total": len(kids), "count": len(page)})
        self.pages.extend(page)
        return True

    def answer(self, overlay) -> dict:
        return {"levels": self.levels, "complete": self.complete,
                "compact": compact_summaries(self.idx, self.pages, overlay)}


class GraphData:
    def __init__(self, logdir: str):
        self.logdir = logdir
        self.files = GraphFiles()
        self._types: Dict[tuple, tuple] = {}
        self._types_lock = threading.Lock()

    def warm_up(self) -> None:
        """Build, in the background at start-up, the indexes of the file the page opens by default (the first
        compare database in listing order, else the first database), so the first open of the tab finds them
        ready. One file only: warming more would compete with the requests it is meant to speed up."""
        def run():
            try:
                root = os.path.realpath(self.logdir)
                entries = [e for files in catalog.scan(self.logdir).values() for e in files if e.format == "db"]
                paths = [os.path.join(root, e.file) if e.run == "." else os.path.join(root, e.run, e.file)
                         for e in entries]
                chosen = next((e for e, p in zip(entries, paths) if self._graph_type(p, set())[0] == "compare"),
                              entries[0] if entries else None)
                if chosen is None:
                    return
                _, gf = self.open(chosen.run, chosen.file)
                meta = gf.meta()
                for side in meta["sides"]:
                    gf.index(meta["steps"][0], meta["ranks"][0], side)
            except Exception:  # noqa: BLE001 - an optimisation only; requests report real problems
                return
        threading.Thread(target=run, name="graph_ascend-warm-up", daemon=True).start()

    # --- helpers ---------------------------------------------------------------------------------------------
    def open(self, run: str, file: str):
        path = catalog.resolve_file(self.logdir, run, file)
        return path, self.files.get(path)

    def side_files(self, run: str, file: str) -> SideFiles:
        path = catalog.resolve_file(self.logdir, run, file)
        return SideFiles(os.path.dirname(path), file)

    def _check_graph(self, gf, step: int, rank: int, side: str) -> None:
        meta = gf.meta()
        if side not in meta["sides"]:
            raise ApiError(404, f"this file has no {side} graph")
        if step not in meta["steps"] or rank not in meta["ranks"]:
            raise ApiError(404, f"no graph for step {step}, rank {rank} in this file")

    def graph(self, run, file, step, rank, side):
        _, gf = self.open(run, file)
        self._check_graph(gf, step, rank, side)
        return gf, gf.index(step, rank, side)

    def overlay(self, run, file, gf, step, rank) -> Optional[Overlay]:
        if gf.meta()["graph_type"] != "compare":
            return None
        sf = self.side_files(run, file)
        matches, unmatched = sf.matches(step, rank), sf.unmatched(step, rank)
        if not matches and not unmatched:
            return None
        return Overlay(gf, step, rank, matches, unmatched, gf.meta()["task"])

    def _overlay_fields(self, run, file, gf, step, rank, side) -> Dict[str, dict]:
        """Side-file edits as summary fields, cached until the side files change (a bulk unmatch can list
        thousands of nodes: they are resolved once, not on every expand)."""
        if gf.meta()["graph_type"] != "compare":
            return {}
        sf = self.side_files(run, file)
        key = ("overlay", step, rank, side, sf.stamp(step, rank))
        with gf.derived_lock:
            found = gf.derived.get(key)
        if found is None:
            ov = self.overlay(run, file, gf, step, rank)
            found = ov.for_side(side) if ov else {}
            with gf.derived_lock:
                for old in [k for k in gf.derived if k[:4] == key[:4]]:
                    del gf.derived[old]
                gf.derived[key] = found
        return found

    # --- routes ----------------------------------------------------------------------------------------------
    def runs(self) -> dict:
        out = []
        root = os.path.realpath(self.logdir)
        listed: set = set()
        for run, entries in catalog.scan(self.logdir).items():
            files = []
            for e in entries:
                item = {"file": e.file, "format": e.format, "size": e.size, "mtime": e.mtime, "graph_type": None}
                path = os.path.join(root, e.file) if run == "." else os.path.join(root, run, e.file)
                graph_type, error = self._graph_type(path, listed)
                item["graph_type"] = graph_type
                if error:
                    item["error"] = error
                files.append(item)
            out.append({"run": run, "files": files})
        with self._types_lock:
            # The cache holds the files of the latest listing, whatever their number: it was cleared whenever it
            # passed 10,000 entries, so a log directory of more files opened every one of them on every listing.
            for ident in [k for k in self._types if k not in listed]:
                del self._types[ident]
        return {"runs": out}

    def _graph_type(self, path: str, listed: set):
        """(graph_type, error) of a listed file, cached by identity (added to ``listed``); listing never evicts
        opened graphs."""
        try:
            ident = file_identity(path)
        except OSError as exc:
            return None, str(exc)
        listed.add(ident)
        with self._types_lock:
            if ident in self._types:
                return self._types[ident]
        try:
            if not os.path.isfile(path):  # (a FIFO: never opened, it would block; the same words as its reads)
                raise ApiError(400, f"{os.path.basename(path)}: not a regular file (a FIFO, a device or a socket)")
            if path.endswith(catalog.DB_SUFFIX):
                conn = open_readonly(path)
                try:
                    # (a table: a VIEW of that name may never end, WITH RECURSIVE, and hung the whole listing)
                    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tb_config'"
                                    ).fetchone() is None:
                        raise ApiError(400, f"{os.path.basename(path)}: not a graph database (no tb_nodes/tb_config "
                                            "tables)")
                    row = conn.execute("SELECT graph_type FROM tb_config LIMIT 1").fetchone()
                except sqlite3.DatabaseError as exc:
                    raise ApiError(400, f"{os.path.basename(path)}: not a graph database ({exc})") from None
                finally:
                    conn.close()
                found = ((row[0] if row else None) or "build", None)
            else:
                found = (self.files.get(path).meta()["graph_type"], None)
        except (ApiError, OSError) as exc:
            found = (None, getattr(exc, "message", str(exc)))
        with self._types_lock:
            self._types[ident] = found
        return found

    def meta(self, run, file) -> dict:
        _, gf = self.open(run, file)
        meta = gf.meta()
        if meta["steps"] and meta["ranks"]:
            # (the step the page opens: a live file's newest, else the first)
            gf.prefetch(meta["steps"][-1 if meta.get("live") else 0], meta["ranks"][0], meta["sides"])
        legend = self.side_files(run, file).legend()
        if legend:
            meta["node_colors"] = legend
            meta["legend_edited"] = True
        return meta

    def _light_file(self, run, file, step, rank, side) -> Optional[DbGraphFile]:
        """The database when the first view of this graph should be answered lightly from SQLite (light_graph.py):
        its index is not ready after a short wait, the light answers are exact for it and no side-file edit
        applies; else None (answer from the index, waiting for it)."""
        _, gf = self.open(run, file)
        if not isinstance(gf, DbGraphFile):
            return None
        self._check_graph(gf, step, rank, side)
        if gf.index_if_ready(step, rank, side, _FIRST_VIEW_WAIT_S) is not None:
            return None
        if gf.meta()["graph_type"] == "compare":
            sf = self.side_files(run, file)
            if sf.matches(step, rank) or sf.unmatched(step, rank):
                return None
        return gf if gf.light_eligible(step, rank, side) else None

    def root(self, run, file, step, rank, side) -> dict:
        light = self._light_file(run, file, step, rank, side)
        if light is not None:
            return dict(light.light_root(step, rank, side), partial=True)
        gf, idx = self.graph(run, file, step, rank, side)
        return idx.summary(idx.root, self._overlay_fields(run, file, gf, step, rank, side))

    def children(self, run, file, step, rank, side, node, micro_step, offset, limit, compact=False) -> dict:
        light = self._light_file(run, file, step, rank, side)
        if light is not None:
            kids = light.light_children(step, rank, side, node, micro_step)
            page = kids[offset: offset + limit]
            out = {"node": node, "total": len(kids), "offset": offset, "partial": True}
            if compact:
                out["compact"] = compact_from_dicts(page)
            else:
                out["children"] = page
            return out
        gf, idx = self.graph(run, file, step, rank, side)
        i = idx.find(node)
        kids = idx.children(i, micro_step)
        over = self._overlay_fields(run, file, gf, step, rank, side)
        page = kids[offset: offset + limit]
        if compact:
            return {"node": node, "total": len(kids), "offset": offset, "compact": compact_summaries(idx, page, over)}
        return {"node": node, "total": len(kids), "offset": offset,
                "children": [idx.summary(c, over) for c in page]}

    def path_children(self, run, file, step, rank, side, node, micro_step, limit) -> dict:
        """The first page (``limit``) of the children of every ancestor of ``node``, root first, in one answer: what
        a client needs to open the path down to it. It asked /api/children once per level, one after the other (a
        node 20,000 levels deep took minutes and never showed)."""
        gf, idx = self.graph(run, file, step, rank, side)
        chain = []
        i = idx.find(node)
        while i >= 0 and len(chain) <= len(idx):   # (the parents form a tree: a cycle was broken when it was built)
            chain.append(i)
            i = int(idx.parent[i])
        chain.reverse()
        pages = _LevelPages(idx, limit)
        for a in chain[:-1]:
            if not pages.add(a, idx.children(a, micro_step)):
                break
        return dict(pages.answer(self._overlay_fields(run, file, gf, step, rank, side)),
                    path=[idx.names[k] for k in chain])

    def depth_children(self, run, file, step, rank, side, depth, micro_step, limit, max_nodes) -> dict:
        """The first page (``limit``) of the children of every node that "expand to depth ``depth``" opens: the
        root, then level by level (breadth first, in child order) each node with children, at most ``max_nodes``
        of them; in one answer, shaped as path_children's. The page asked /api/children once per node (6,000
        requests and 63 s for two sides of a module with 5,000 children)."""
        gf, idx = self.graph(run, file, step, rank, side)
        pages = _LevelPages(idx, limit)
        capped = False
        frontier = [idx.root]
        for _ in range(depth):
            following = []
            for a in frontier:
                # (a node opens when it has children at all, as the page counts them (its summary's n_children);
                # its page is those of the micro step asked for, as /api/children gives them)
                if not idx.n_children(a):
                    continue
                if len(pages.levels) >= max_nodes:
                    capped = True
                    break
                kids = idx.children(a, micro_step)
                if not pages.add(a, kids):
                    break
                following.extend(kids)
            if capped or not pages.complete:
                break
            frontier = following
        return dict(pages.answer(self._overlay_fields(run, file, gf, step, rank, side)), capped=capped)

    def node(self, run, file, step, rank, side, node) -> dict:
        gf, idx = self.graph(run, file, step, rank, side)
        i = idx.find(node)
        row = gf.node(step, rank, side, node)
        summary = idx.summary(i, self._overlay_fields(run, file, gf, step, rank, side))
        out = detail(row, idx.path(i), summary["precision"], summary["overflow"],
                     (summary["subtree_precision"], summary["subtree_overflow"]), None, os.path.basename(gf.path))
        ov = self.overlay(run, file, gf, step, rank)
        if ov is not None:
            self._overlay_counterpart(gf, step, rank, side, out, ov)
        out["matched"] = summary["matched"]
        out["order"] = i
        out["data_flow"] = gf.data_flow(step, rank, side, node)
        other = "Bench" if side == "NPU" else "NPU"
        if out["counterpart"] and other in gf.meta()["sides"]:
            try:
                peer = gf.node(step, rank, other, out["counterpart"])
                out["counterpart_data"] = split_params(out["counterpart"], peer.get("input_data") or {},
                                                       peer.get("output_data") or {})
            except ApiError:
                out["counterpart_data"] = None
        return out

    @staticmethod
    def _overlay_counterpart(gf, step, rank, side, out: dict, ov: Overlay) -> None:
        """The edited counterpart, and a link that leads to it (the browser reveals the counterpart by the link:
        the stored one would still lead to the partner a manual match replaced)."""
        peer = ov.counterpart(side, out["name"], out["counterpart"])
        if peer == out["counterpart"]:
            return
        out["counterpart"] = peer
        other = gf.index(step, rank, "Bench" if side == "NPU" else "NPU")
        i = other.by_name.get(peer) if peer is not None else None
        out["matched_node_link"] = other.path(i) if i is not None else []

    def search(self, run, file, step, rank, side, q, regex, offset, limit) -> dict:
        gf, idx = self.graph(run, file, step, rank, side)
        if q == "":
            return {"total": 0, "offset": offset, "items": []}
        total, hits = idx.search.find(q, regex, want=offset + limit)
        over = self._overlay_fields(run, file, gf, step, rank, side)
        items = [_short(idx, i, over) for i in hits[offset: offset + limit]]
        return {"total": total, "offset": offset, "items": items}

    def filter(self, run, file, step, rank, side, precision: List[str], overflow: List[str], sort: str,
               desc: bool, offset: int, limit: int, metric: str = "") -> dict:
        gf, idx = self.graph(run, file, step, rank, side)
        over = self._overlay_fields(run, file, gf, step, rank, side)
        bounds = _legend_bounds(self.meta(run, file).get("node_colors") or {})
        mask = np.ones(len(idx), dtype=bool)
        if precision:
            prec = idx.precision.copy()
            for name, fields in over.items():
                i = idx.by_name.get(name)
                if i is not None and "precision" in fields:
                    prec[i] = np.nan if fields["precision"] is None else fields["precision"]
            mask &= np.isin(precision_classes(prec, bounds), [PRECISION_CLASSES.index(p) for p in precision])
        if overflow:
            mask &= np.isin(idx.overflow, [OVERFLOW_LEVELS.index(o) for o in overflow])
        hits = np.flatnonzero(mask)
        if sort == "precision":
            vals = idx.precision
            hits = _sorted_missing_last(hits.tolist(), lambda i: None if vals[i] != vals[i] else float(vals[i]), desc)
        elif sort == "name":
            hits = sorted(hits.tolist(), key=lambda i: idx.names[i], reverse=desc)
        elif sort not in ("", "order"):
            if sort not in METRIC_FIELDS:
                raise ApiError(400, f"unknown sort {quoted(sort)}: use order, precision, name or one of {', '.join(METRIC_FIELDS)}")
            table = self._metrics(gf, step, rank, side, (sort,))
            # (by magnitude, NaN above an infinity above the rest: metric_sort_key)
            hits = _sorted_missing_last(hits.tolist(),
                                        lambda i: metric_sort_key(table.get(idx.names[i], {}).get(sort)), desc)
        else:
            hits = hits[::-1] if desc else hits
        hits = list(hits)
        page = hits[offset: offset + limit]
        if metric and metric not in METRIC_FIELDS:
            raise ApiError(400, f"unknown metric {quoted(metric)}: use one of {', '.join(METRIC_FIELDS)}")
        if metric or len(page) > _PAGE_PARSE_LIMIT:
            table = self._metrics(gf, step, rank, side, (metric,) if metric else METRIC_FIELDS)
        else:  # a small page: read its rows directly rather than computing every metric of the whole graph
            table = {}
            for i in page:
                row = gf.node(step, rank, side, idx.names[i])
                table[idx.names[i]] = row_metrics(idx.names[i], row.get("input_data"), row.get("output_data"))
        items = []
        for i in page:
            item = _short(idx, i, over)
            item["metrics"] = table.get(idx.names[i], {})
            items.append(item)
        return {"total": len(hits), "offset": offset, "items": items}

    def _metrics(self, gf, step, rank, side, fields) -> Dict[str, Dict[str, MetricValue]]:
        """Metric values of every node for ``fields``, computed once per (graph, metric) and cached."""
        with gf.derived_lock:
            cached = {f: gf.derived.get(("metric", step, rank, side, f)) for f in fields}
        missing = tuple(f for f, v in cached.items() if v is None)
        if missing:
            table = gf.metric_table(step, rank, side, missing)
            with gf.derived_lock:
                for f in missing:
                    cached[f] = {name: m[f] for name, m in table.items() if f in m}
                    gf.derived[("metric", step, rank, side, f)] = cached[f]
        out: Dict[str, Dict[str, MetricValue]] = {}
        for f, values in cached.items():
            for name, value in values.items():
                out.setdefault(name, {})[f] = value
        return out

    def compare_table(self, run, file, step, rank, precision, q, sort, desc, offset, limit) -> dict:
        gf, idx = self.graph(run, file, step, rank, "NPU")
        key = ("table", step, rank)
        with gf.derived_lock:
            table = gf.derived.get(key)
        if table is None:
            def prec_of(name):
                i = idx.by_name.get(name)
                v = float(idx.precision[i]) if i is not None else float("nan")
                return None if v != v else v
            table = build_rows(gf.data_rows(step, rank, "NPU"), prec_of)
            with gf.derived_lock:
                gf.derived[key] = table
        bounds = _legend_bounds(self.meta(run, file).get("node_colors") or {})
        rows = table.rows
        if precision:
            want = set(precision)
            rows = [r for r in rows if precision_class(float("nan") if r["precision"] is None else r["precision"],
                                                       bounds) in want]
        if q:
            ql = q.lower()
            rows = [r for r in rows if ql in r["node"].lower()]
        if sort and sort != "order":
            if sort not in table.columns:
                raise ApiError(400, f"unknown sort column {quoted(sort)}")
            if sort in ("node", "io", "key"):
                rows = sorted(rows, key=lambda r: str(r.get(sort) or ""), reverse=desc)
            else:
                rows = _sorted_missing_last(rows, lambda r: sort_key_number(r.get(sort)), desc)
        elif desc:
            rows = list(reversed(rows))
        return {"columns": table.columns, "total": len(rows), "offset": offset,
                "rows": rows[offset: offset + limit] if limit else rows}

    def compare_csv(self, *args) -> str:
        result = self.compare_table(*args)
        return to_csv(result["rows"], result["columns"] or BASE_COLUMNS)

    def findings(self, run, file, step, rank) -> dict:
        gf, idx = self.graph(run, file, step, rank, "NPU")
        stored = gf.stored_findings(step, rank)
        if stored is not None:
            out = {"source": "stored",
                   "first_divergence": stored_finding(idx, stored.get("first_divergence")),
                   "first_overflow": stored_finding(idx, stored.get("first_overflow"))}
        else:
            out = {"source": "computed", "first_divergence": first_divergence(idx),
                   "first_overflow": self._first_overflow(gf, idx, step, rank, "NPU")}
        # (a rank the difference reached through a collective has none of its own: the page points at the run's)
        out["run_first_divergence"] = gf.run_first_divergence()
        if out["first_divergence"] is not None:
            # why it was chosen: the page says it where it goes (a node drawn as passing, with no word why)
            out["first_divergence"]["why"] = divergence_why(gf, step, rank, out["first_divergence"])
        return out

    @staticmethod
    def _once(gf, what: str, fn, idx, step, rank, side):
        """fn(gf, idx, step, rank, side), worked out once per graph and kept with the file's derived tables."""
        key = (what, step, rank, side)
        with gf.derived_lock:
            found = gf.derived.get(key)
        if found is None:
            found = (fn(gf, idx, step, rank, side),)
            with gf.derived_lock:
                gf.derived[key] = found
        return found[0]

    @classmethod
    def _first_overflow(cls, gf, idx, step, rank, side) -> Optional[dict]:
        """findings.first_overflow, once per graph (it reads the rows of critical nodes until one qualifies: a
        graph of many masked_fill(-inf) reads them all)."""
        return cls._once(gf, "first_overflow", first_overflow, idx, step, rank, side)

    @classmethod
    def _nonfinite_enters(cls, gf, idx, step, rank, side) -> Optional[str]:
        """findings.nonfinite_enters, once per graph."""
        return cls._once(gf, "nonfinite_enters", nonfinite_enters, idx, step, rank, side)

    def overflow(self, run, file, step, rank, side="NPU") -> dict:
        gf, idx = self.graph(run, file, step, rank, side)
        found = np.flatnonzero(idx.overflow > 0)
        found = found[np.argsort(idx.exec_order[found], kind="stable")].tolist()
        # "first": where the overflow starts, by the graph builder's rule on either side (findings.py): on the
        # debug side the node /api/findings names (stored by tbprobe, else computed), on the bench side, which
        # has no stored finding, computed alike. Never the earliest high or medium node: Inf came in already.
        stored = gf.stored_findings(step, rank) if side == "NPU" else None
        if stored is not None:
            start = stored_finding(idx, stored.get("first_overflow"))
        else:
            start = self._first_overflow(gf, idx, step, rank, side) if found else None
        first = start["name"] if start else None
        # (no start: where Inf/NaN first comes in, made by a call the dump does not record, e.g. a GradScaler's
        # loss gradient cast to float16 in the backward)
        enters = self._nonfinite_enters(gf, idx, step, rank, side) if found and first is None else None
        items = [{"name": idx.names[i], "type": int(idx.types[i]), "overflow": OVERFLOW_LEVELS[idx.overflow[i]],
                  "order": i, "exec_order": int(idx.exec_order[i]), "first": idx.names[i] == first,
                  "enters": idx.names[i] == enters} for i in found]
        return {"total": len(items), "items": items}

    def matches(self, run, file, step, rank) -> dict:
        sf = self.side_files(run, file)
        return {"file": matches_name(file, step, rank), "matches": sf.matches(step, rank),
                "unmatched": sf.unmatched(step, rank)}


def _short(idx: GraphIndex, i: int, over: Dict[str, dict]) -> dict:
    s = idx.summary(i, over)
    return {"name": s["name"], "type": s["type"], "precision": s["precision"], "overflow": s["overflow"],
            "matched": s["matched"], "order": i, "path": idx.path(i)}


def _sorted_missing_last(items: list, key, desc: bool) -> list:
    """Sorted by ``key`` (ascending, or descending with ``desc``); items whose key is None stay last either way."""
    keyed = [(key(x), x) for x in items]
    present = [kx for kx in keyed if kx[0] is not None]
    present.sort(key=lambda kx: kx[0], reverse=desc)
    return [x for _, x in present] + [x for k, x in keyed if k is None]


def _legend_bounds(colors: dict):
    """Upper bounds of pass / warning / error from the legend's ``value`` ranges (default when unreadable)."""
    uppers = {}
    for spec in colors.values():
        if not isinstance(spec, dict):
            continue
        level = str(spec.get("accuracy_level") or "").lower()
        value = spec.get("value")
        if level in ("pass", "warning", "error") and isinstance(value, list) and len(value) == 2:
            try:
                uppers[level] = float(value[1])
            except (TypeError, ValueError):
                continue
    if set(uppers) != {"pass", "warning", "error"}:
        return ((0.3, "pass"), (0.6, "warning"), (float("inf"), "error"))
    return ((uppers["pass"], "pass"), (uppers["warning"], "warning"), (float("inf"), "error"))
