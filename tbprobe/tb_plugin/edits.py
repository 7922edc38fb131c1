"""The write routes' work: manual match / unmatch into side files, legend edits, and the explicit apply that
copies the database to a backup and then writes the side-file edits into it."""
import json
import os
import shutil
import sqlite3
import time
from typing import Dict, List

from tbprobe.tb_plugin.api_error import ApiError
from tbprobe.tb_plugin.graph_data import GraphData
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tbprobe.tb_plugin.manual_match import pair_descendants, recompute
from tbprobe.tb_plugin.side_files import matches_name

__all__ = ["Edits", "validate_legend"]

_MAX_LEGEND_ENTRIES = 64


def validate_legend(colors) -> Dict[str, dict]:
    if not isinstance(colors, dict) or not colors or len(colors) > _MAX_LEGEND_ENTRIES:
        raise ApiError(400, "node_colors must be a non-empty object of at most 64 colours")
    out = {}
    for color, spec in colors.items():
        if not (isinstance(color, str) and len(color) in (4, 7) and color.startswith("#")
                and all(c in "0123456789abcdefABCDEF" for c in color[1:])):
            raise ApiError(400, f"bad colour {str(color)[:20]!r}: expected #RGB or #RRGGBB")
        if not isinstance(spec, dict):
            raise ApiError(400, f"colour {color}: expected an object with value/description/accuracy_level")
        value = spec.get("value", [])
        if not isinstance(value, list) or len(value) not in (0, 2) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ApiError(400, f"colour {color}: value must be [] or [low, high]")
        out[color] = {"value": value, "description": str(spec.get("description", ""))[:500],
                      "accuracy_level": str(spec.get("accuracy_level", ""))[:50]}
    return out


class Edits:
    def __init__(self, data: GraphData):
        self.data = data

    def _compare_graphs(self, run, file, step, rank):
        gf, npu = self.data.graph(run, file, step, rank, "NPU")
        if gf.meta()["graph_type"] != "compare":
            raise ApiError(400, "manual matching needs a compare graph")
        _, bench = self.data.graph(run, file, step, rank, "Bench")
        return gf, npu, bench

    def match(self, run, file, step, rank, debug: str, bench_name: str, descendants: bool) -> dict:
        gf, npu, bench = self._compare_graphs(run, file, step, rank)
        d, b = npu.find(debug), bench.find(bench_name)
        pairs = pair_descendants(npu, bench, d, b) if descendants else [(d, b)]
        sf = self.data.side_files(run, file)
        with sf.lock(matches_name(file, step, rank)):
            matches, unmatched = sf.matches(step, rank), set(sf.unmatched(step, rank))
            for pd, pb in pairs:
                matches[npu.names[pd]] = bench.names[pb]
                unmatched.discard(npu.names[pd])
            sf.save_matches(step, rank, matches, sorted(unmatched))
        return {"file": matches_name(file, step, rank), "changed": self._changed(run, file, gf, step, rank, pairs)}

    def unmatch(self, run, file, step, rank, debug: str, descendants: bool) -> dict:
        gf, npu, bench = self._compare_graphs(run, file, step, rank)
        d = npu.find(debug)
        names = [d]
        if descendants:
            k = 0
            while k < len(names):
                names.extend(npu.children(names[k]))
                k += 1
        sf = self.data.side_files(run, file)
        pairs = []
        with sf.lock(matches_name(file, step, rank)):
            matches, unmatched = sf.matches(step, rank), set(sf.unmatched(step, rank))
            for i in names:
                name = npu.names[i]
                manual = matches.pop(name, None)
                stored_peer = _stored_peer(gf, step, rank, name)
                if stored_peer:
                    unmatched.add(name)
                for peer in (manual, stored_peer):
                    if peer and peer in bench.by_name:
                        pairs.append((i, bench.by_name[peer]))
                if not manual and not stored_peer:
                    pairs.append((i, -1))
            sf.save_matches(step, rank, matches, sorted(unmatched))
        return {"file": matches_name(file, step, rank), "changed": self._changed(run, file, gf, step, rank, pairs)}

    def _changed(self, run, file, gf, step, rank, pairs) -> List[dict]:
        _, npu = self.data.graph(run, file, step, rank, "NPU")
        _, bench = self.data.graph(run, file, step, rank, "Bench")
        ov = self.data.overlay(run, file, gf, step, rank)
        over_n = ov.for_side("NPU") if ov else {}
        over_b = ov.for_side("Bench") if ov else {}
        out = []
        for d, b in pairs[:5000]:
            out.append(dict(npu.summary(d, over_n), side="NPU"))
            if b >= 0:
                out.append(dict(bench.summary(b, over_b), side="Bench"))
        return out

    def legend(self, run, file, colors) -> dict:
        self.data.open(run, file)
        clean = validate_legend(colors)
        self.data.side_files(run, file).save_legend(clean)
        return {"node_colors": clean}

    def apply(self, run, file) -> dict:
        """Write the side-file edits into the database, after copying it to ``<file>.bak-<timestamp>``."""
        path, gf = self.data.open(run, file)
        if not isinstance(gf, DbGraphFile):
            raise ApiError(400, "apply works on .vis.db files only")
        meta = gf.meta()
        sf = self.data.side_files(run, file)
        updates = []  # (step, rank, matches, unmatched)
        for step in meta["steps"]:
            for rank in meta["ranks"]:
                m, u = sf.matches(step, rank), sf.unmatched(step, rank)
                if m or u:
                    updates.append((step, rank, m, u))
        legend = sf.legend()
        if not updates and not legend:
            raise ApiError(409, "nothing to apply: no side-file edits for this file")
        if os.path.exists(path + "-wal"):
            raise ApiError(409, "the database is being written by another program; try again when it is done")
        backup = f"{path}.bak-{time.strftime('%Y%m%d%H%M%S')}"
        if os.path.exists(backup):
            raise ApiError(409, "a backup with this timestamp exists already; retry in a second")
        shutil.copy2(path, backup)
        node_rows = []
        data_rows = []  # recomputed compare fields of manually matched debug nodes
        for step, rank, m, u in updates:
            _, npu = self.data.graph(run, file, step, rank, "NPU")
            _, bench = self.data.graph(run, file, step, rank, "Bench")
            for d in u:
                peer = _stored_peer(gf, step, rank, d)
                node_rows.append(("[]", None, step, rank, "NPU", d))
                if peer:
                    node_rows.append(("[]", None, step, rank, "Bench", peer))
            for d, b in m.items():
                if d not in npu.by_name or b not in bench.by_name:
                    continue
                prec, ind, outd = recompute(gf, step, rank, d, b, meta["task"])
                node_rows.append((json.dumps(bench.path(bench.by_name[b])), prec, step, rank, "NPU", d))
                node_rows.append((json.dumps(npu.path(npu.by_name[d])), None, step, rank, "Bench", b))
                if ind is not None and outd is not None:
                    data_rows.append((json.dumps(ind), json.dumps(outd), step, rank, "NPU", d))
        conn = sqlite3.connect(path)
        try:
            with conn:
                conn.executemany(
                    "UPDATE tb_nodes SET matched_node_link = ?, precision_index = ?, modified = 1"
                    " WHERE step = ? AND rank = ? AND data_source = ? AND node_name = ?", node_rows)
                conn.executemany(
                    "UPDATE tb_nodes SET input_data = ?, output_data = ?"
                    " WHERE step = ? AND rank = ? AND data_source = ? AND node_name = ?", data_rows)
                if legend:
                    conn.execute("UPDATE tb_config SET node_colors = ?", (json.dumps(legend),))
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.DatabaseError as exc:
            conn.close()
            shutil.copy2(backup, path)
            raise ApiError(409, f"could not write the database ({exc}); it was restored from the backup") from None
        conn.close()
        self.data.files.forget(path)
        return {"backup": os.path.basename(backup), "nodes_updated": len(node_rows), "legend": bool(legend)}


def _stored_peer(gf, step, rank, name):
    try:
        link = gf.node(step, rank, "NPU", name).get("matched_node_link") or []
    except ApiError:
        return None
    return str(link[-1]) if link else None
