"""The write routes' work: manual match / unmatch into side files, legend edits, and the explicit apply that
copies the database to a backup, writes the side-file edits into it and retires their side files."""
import contextlib
import json
import math
import os
import shutil
import sqlite3
import threading
import time
from typing import Dict, List, Tuple

from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.graph_data import GraphData
from tbprobe.tb_plugin.graph_store import DbGraphFile
from tbprobe.tb_plugin.manual_match import Overlay, pair_descendants, recompute
from tbprobe.tb_plugin.side_files import legend_name, matches_name, unmatch_name
from tbprobe.tb_plugin.sqlite_ro import open_readonly

__all__ = ["Edits", "validate_legend"]

_MAX_LEGEND_ENTRIES = 64
_MAX_CHANGED = 5000  # pairs whose nodes a match's answer lists: a bulk match can pair far more


def validate_legend(colors) -> Dict[str, dict]:
    """The legend as stored: every entry checked, and no two entries that would paint with one colour or claim
    one precision (the frontend keys its legend by colour, so a clash would silently drop an entry)."""
    if not isinstance(colors, dict) or not colors or len(colors) > _MAX_LEGEND_ENTRIES:
        raise ApiError(400, "node_colors must be a non-empty object of at most 64 colours")
    out = {}
    for color, spec in colors.items():
        _check_color(color)
        if not isinstance(spec, dict):
            raise ApiError(400, f"colour {color}: expected an object with value/description/accuracy_level")
        out[color] = {"value": _legend_range(color, spec.get("value", [])),
                      "description": _legend_text(color, spec, "description", 500),
                      "accuracy_level": _legend_text(color, spec, "accuracy_level", 50)}
    _check_no_clash(out)
    return out


def _legend_text(color: str, spec: dict, key: str, limit: int) -> str:
    """A legend entry's text field: a JSON string (5 and [] were stored as the text "5" and "[]")."""
    value = spec.get(key, "")
    if not isinstance(value, str):
        raise ApiError(400, f"colour {color}: {key} must be text, got {json.dumps(value)[:40]}")
    return value[:limit]


def _check_color(color) -> None:
    if not (isinstance(color, str) and len(color) in (4, 7) and color.startswith("#")
            and all(c in "0123456789abcdefABCDEF" for c in color[1:])):
        raise ApiError(400, f"bad colour {quoted(color, 20)}: expected #RGB or #RRGGBB")


def _legend_range(color: str, value) -> list:
    if not isinstance(value, list) or len(value) not in (0, 2) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise ApiError(400, f"colour {color}: value must be [] or [low, high]")
    # json.loads reads NaN and Infinity; stored, they would come back as null and break the range lookup
    if not all(math.isfinite(v) for v in value):
        raise ApiError(400, f"colour {color}: value must hold finite numbers")
    if value and value[0] > value[1]:
        raise ApiError(400, f"colour {color}: value [{value[0]}, {value[1]}] has its low end above its high end")
    return value


def _canonical_color(color: str) -> str:
    digits = color[1:].upper()
    return "#" + ("".join(c * 2 for c in digits) if len(digits) == 3 else digits)


def _check_no_clash(legend: Dict[str, dict]) -> None:
    seen: Dict[str, str] = {}
    for color in legend:
        same = seen.setdefault(_canonical_color(color), color)
        if same != color:
            raise ApiError(400, f"colours {same} and {color} are the same colour: each entry needs its own")
    entries = list(legend.items())
    for i, (a, spec_a) in enumerate(entries):
        for b, spec_b in entries[i + 1:]:
            if _ranges_clash(spec_a["value"], spec_b["value"]):
                raise ApiError(400, f"colours {a} and {b} claim overlapping ranges {spec_a['value']} and "
                                    f"{spec_b['value']}")


def _ranges_clash(x: list, y: list) -> bool:
    """Two empty ranges both claim the unmatched nodes; two ranges clash when they share more than an end."""
    if not x or not y:
        return not x and not y
    return max(x[0], y[0]) < min(x[1], y[1])


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
        pairs = [(npu.names[pd], bench.names[pb]) for pd, pb in
                 (pair_descendants(npu, bench, d, b) if descendants else [(d, b)])]
        sf = self.data.side_files(run, file)
        with sf.lock():
            matches, unmatched = sf.matches(step, rank), set(sf.unmatched(step, rank))
            before = Overlay(gf, step, rank, dict(matches), sorted(unmatched), gf.meta()["task"])
            claimants = _claimants(matches)
            for dn, bn in pairs:
                _claim(matches, unmatched, claimants, dn, bn)
            sf.save_matches(step, rank, matches, sorted(unmatched))
        shown = pairs[:_MAX_CHANGED]
        debugs, benches = _neighbours(before, [dn for dn, _ in shown], [bn for _, bn in shown])
        return {"file": matches_name(file, step, rank),
                "changed": self._changed(run, file, gf, step, rank, debugs, benches)}

    def unmatch(self, run, file, step, rank, debug: str, descendants: bool) -> dict:
        gf, npu, bench = self._compare_graphs(run, file, step, rank)
        names = [npu.find(debug)]
        if descendants:
            k = 0
            while k < len(names):
                names.extend(npu.children(names[k]))
                k += 1
        names = [npu.names[i] for i in names]
        sf = self.data.side_files(run, file)
        with sf.lock():
            matches, unmatched = sf.matches(step, rank), set(sf.unmatched(step, rank))
            before = Overlay(gf, step, rank, dict(matches), sorted(unmatched), gf.meta()["task"])
            for name in names:
                matches.pop(name, None)
                if _stored_peer(gf, step, rank, name):
                    unmatched.add(name)
            sf.save_matches(step, rank, matches, sorted(unmatched))
        debugs, benches = _neighbours(before, names[:_MAX_CHANGED], [])
        return {"file": matches_name(file, step, rank),
                "changed": self._changed(run, file, gf, step, rank, debugs, benches)}

    def _changed(self, run, file, gf, step, rank, debugs: List[str], benches: List[str]) -> List[dict]:
        _, npu = self.data.graph(run, file, step, rank, "NPU")
        _, bench = self.data.graph(run, file, step, rank, "Bench")
        ov = self.data.overlay(run, file, gf, step, rank)
        out = []
        for side, idx, names in (("NPU", npu, debugs), ("Bench", bench, benches)):
            over = ov.for_side(side) if ov else {}
            out.extend(dict(idx.summary(idx.by_name[n], over), side=side) for n in names if n in idx.by_name)
        return out

    def legend(self, run, file, colors) -> dict:
        self.data.open(run, file)
        clean = validate_legend(colors)
        sf = self.data.side_files(run, file)
        with sf.lock():  # (an apply folding the legend in must not retire a newer one)
            sf.save_legend(clean)
        return {"node_colors": clean}

    def apply(self, run, file) -> dict:
        """Write the side-file edits into the database, after copying it to ``<file>.bak-<timestamp>``."""
        path = self.data.open(run, file)[0]
        with _apply_lock(path):  # (two applies at once wrote the file together, each with its own backup)
            return self._apply(run, file)

    def _apply(self, run, file) -> dict:
        path, gf = self.data.open(run, file)
        if not isinstance(gf, DbGraphFile):
            raise ApiError(400, "apply works on .vis.db files only")
        meta = gf.meta()
        sf = self.data.side_files(run, file)
        # The side files stay as read until they are retired: a match, unmatch or legend edit meanwhile waits for
        # the apply (else it could go into a file that is then retired unapplied). One lock covers them all, every
        # step and rank's (a lock per name was one per step x rank, kept for good); it is taken after the apply's
        # own, which no holder of a side-file lock ever waits for.
        with sf.lock():
            return self._apply_side_files(run, file, path, meta, sf)

    def _apply_side_files(self, run, file, path, meta, sf) -> dict:
        updates = []  # (step, rank, matches, unmatched)
        for step in meta["steps"]:
            for rank in meta["ranks"]:
                m, u = sf.matches(step, rank), sf.unmatched(step, rank)
                if m or u:
                    updates.append((step, rank, m, u))
        legend = sf.legend()
        if not updates and not legend:
            raise ApiError(409, "nothing to apply: no side-file edits for this file")
        folded = [n for step, rank, _, _ in updates for n in (matches_name(file, step, rank),
                                                              unmatch_name(file, step, rank))]
        folded = [n for n in folded + ([legend_name(file)] if legend else []) if os.path.exists(sf.path(n))]
        _check_journals(path)
        _check_no_triggers(path)
        if os.path.exists(path + "-wal") and not _log_folded_in(path):
            raise ApiError(409, "the database is being written by another program; try again when it is done")
        path, gf = self.data.open(run, file)  # (the log just folded in made it another file: its current reader)
        node_rows = []
        data_rows = []  # recomputed compare fields of manually matched debug nodes
        for step, rank, m, u in updates:
            _, npu = self.data.graph(run, file, step, rank, "NPU")
            _, bench = self.data.graph(run, file, step, rank, "Bench")
            ov = Overlay(gf, step, rank, m, u, meta["task"])
            for row in _link_rows(ov, npu, bench, step, rank):
                fields = row[6]
                if not _changes(gf, row, fields):
                    continue  # (the database holds this already: an edit applied before, or one matching it)
                node_rows.append(row[:6])
                if fields is not None:
                    data_rows.append((json.dumps(fields[0]), json.dumps(fields[1]), step, rank, "NPU", row[5]))
        legend_changes = bool(legend) and _json_text(legend) != _json_text(gf.meta()["node_colors"])
        stamp = time.strftime('%Y%m%d%H%M%S')
        if not node_rows and not legend_changes:
            # Every edit is in the database already: nothing to write or back up. The side files only repeat it,
            # but they are the user's: retired to their `.bak-<stamp>` names as after a write (reserved first,
            # exclusively), never removed with no copy
            _reserve([sf.path(n) + f".bak-{stamp}" for n in folded])
            _retire(sf, folded, f".bak-{stamp}")
            return {"backup": None, "nodes_updated": 0, "legend": False, "side_files": folded}
        backup = f"{path}.bak-{stamp}"
        # Every name the apply writes is created here, never through what is there: the side files' retired names
        # are reserved (created empty, exclusively) before anything is written, then the backup is created the
        # same way and filled. A name taken by anything (a file, a folder, a link, dangling or not) is refused:
        # `os.path.exists` is False for a dangling link, and the copy followed a planted one out of the log dir.
        reserved = _reserve([sf.path(n) + f".bak-{stamp}" for n in folded])
        try:
            _copy_exclusive(path, backup)
        except BaseException:
            _unlink_all(reserved)
            raise
        # The pooled read-only connections go first: SQLite removes a database's -wal and -shm when its last
        # connection closes, and a read-only one cannot; one left open beside the writer kept both for good.
        self.data.files.forget(path)
        conn = sqlite3.connect(path)
        try:
            with conn:
                conn.executemany(
                    "UPDATE tb_nodes SET matched_node_link = ?, precision_index = ?, modified = 1"
                    " WHERE step = ? AND rank = ? AND data_source = ? AND node_name = ?", node_rows)
                conn.executemany(
                    "UPDATE tb_nodes SET input_data = ?, output_data = ?"
                    " WHERE step = ? AND rank = ? AND data_source = ? AND node_name = ?", data_rows)
                if legend_changes:
                    conn.execute("UPDATE tb_config SET node_colors = ?", (json.dumps(legend),))
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.DatabaseError as exc:
            conn.close()
            shutil.copy2(backup, path)
            _unlink_all(reserved)
            raise ApiError(409, f"could not write the database ({exc}); it was restored from the backup") from None
        self.data.files.forget(path)  # (readers opened meanwhile)
        conn.close()
        _drop_side_files(path)
        # The edits are the database's now: their side files are retired beside its backup (the pair is the file
        # as it was before), so a second apply has nothing to do and the view shows the stored matches
        _retire(sf, folded, f".bak-{stamp}")
        return {"backup": os.path.basename(backup), "nodes_updated": len(node_rows), "legend": legend_changes,
                "side_files": folded}


def _json_text(value) -> str:
    return json.dumps(value, sort_keys=True)


def _changes(gf, row, fields) -> bool:
    """Whether an apply's row (link, precision, step, rank, side, name) or compare fields differ from the
    stored node. Every node the edits pair manually or leave without a counterpart yields a row: re-applying
    edits the database held already rewrote them all, counted them as updated and made a backup each time."""
    link, prec, step, rank, side, name = row[:6]
    try:
        stored = gf.node(step, rank, side, name)
    except ApiError:
        return True
    if json.loads(link) != stored.get("matched_node_link") or _number(stored.get("precision_index")) != _number(prec):
        return True
    return fields is not None and (_json_text(fields[0]) != _json_text(stored.get("input_data") or {})
                                   or _json_text(fields[1]) != _json_text(stored.get("output_data") or {}))


def _number(value):
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_exclusive(path: str) -> int:
    """A descriptor of a new, empty file at ``path``, created by this call (O_CREAT | O_EXCL | O_NOFOLLOW: never
    through a link, dangling or not). 403 when a symbolic link holds the name, 409 when anything else does."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except FileExistsError:
        name = os.path.basename(path)
        if os.path.islink(path):
            raise ApiError(403, f"apply refused: {name} is a symbolic link (the apply writes that name itself); "
                                "nothing was written") from None
        raise ApiError(409, f"apply refused: {name} exists already (the apply writes that name); nothing was "
                            "written: move it away, or retry in a second") from None
    except OSError as exc:
        raise ApiError(503, f"apply refused: {os.path.basename(path)} could not be created ({exc.strerror}); "
                            "nothing was written") from None


def _reserve(paths: List[str]) -> List[str]:
    """Create each path empty and exclusively (the names side files are retired to); all or none."""
    made: List[str] = []
    try:
        for p in paths:
            os.close(_create_exclusive(p))
            made.append(p)
    except BaseException:
        _unlink_all(made)
        raise
    return made


def _unlink_all(paths: List[str]) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            os.unlink(p)


def _copy_exclusive(src: str, dst: str) -> None:
    """``shutil.copy2(src, dst)`` into a file this call creates (see _create_exclusive); a copy that fails
    part-way is removed (503), never left half-written."""
    fd = _create_exclusive(dst)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
            st = os.fstat(inp.fileno())
            os.chmod(out.fileno(), st.st_mode & 0o7777)
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError as exc:
        _unlink_all([dst])
        raise ApiError(503, f"apply refused: the backup {os.path.basename(dst)} could not be written "
                            f"({exc.strerror or exc}); nothing was applied") from None
    except BaseException:
        _unlink_all([dst])
        raise


def _check_journals(path: str) -> None:
    """403 when SQLite's side files of the database (-journal, -wal, -shm), which the apply's writer opens, are
    links or not regular files (SQLite refuses a linked one too, but only once the backup is made)."""
    for suffix in ("-journal", "-wal", "-shm"):
        p = path + suffix
        if os.path.islink(p) or (os.path.lexists(p) and not os.path.isfile(p)):
            what = "a symbolic link" if os.path.islink(p) else "not a regular file"
            raise ApiError(403, f"apply refused: {os.path.basename(p)} is {what}; nothing was written")


def _check_no_triggers(path: str) -> None:
    """Refuse to write a database that holds triggers (neither msprobe nor tbprobe writes any): the apply's UPDATE
    ran whatever a planted one said, an endless INSERT filling the disk (3.3 GB in 41 s for a bounded one)."""
    conn = open_readonly(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' LIMIT 3")]
    except sqlite3.DatabaseError as exc:
        raise ApiError(400, f"{os.path.basename(path)}: database read failed ({exc})") from None
    finally:
        conn.close()
    if names:
        raise ApiError(400, f"{os.path.basename(path)}: apply refused: the database holds SQL triggers "
                            f"({', '.join(quoted(n, 60) for n in names)}), which a write would run; neither msprobe "
                            "nor tbprobe writes any")


def _retire(sf, names: List[str], suffix: str) -> None:
    """Side files folded into the database: renamed ``<name><suffix>`` (over the empty file _reserve made for
    it: a rename replaces a link there, never writes through it)."""
    for name in names:
        src = sf.path(name)
        try:
            os.replace(src, src + suffix)
        except FileNotFoundError:
            _unlink_all([src + suffix])   # (its reserved name, left empty)


# Applies of one file run one at a time: a file takes the lock of its stripe (its real path's hash), a fixed set
# (one lock per path ever applied grew without bound); two files sharing a stripe only wait for each other.
_APPLY_LOCKS = tuple(threading.Lock() for _ in range(64))


def _apply_lock(path: str) -> threading.Lock:
    return _APPLY_LOCKS[hash(os.path.realpath(path)) % len(_APPLY_LOCKS)]


def _drop_side_files(path: str) -> None:
    """Leave no -wal / -shm beside the written database: where a reader opened the file while it was written
    (and so kept them), fold the log in again from a connection that is then the last one, whose close removes
    both. Nothing is done while another program holds the database (its own close removes them)."""
    if os.path.exists(path + "-wal") or os.path.exists(path + "-shm"):
        _log_folded_in(path)


def _log_folded_in(path: str) -> bool:
    """Whether the database's write-ahead log could be folded into the file (a TRUNCATE checkpoint no reader or
    writer holds up). A -wal file alone does not mean a writer: a live graph closed while TensorBoard read it
    leaves its log behind, which no read-only reader can remove, and apply was refused for good."""
    try:
        conn = sqlite3.connect(path, timeout=2)
    except sqlite3.Error:
        return False
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _claimants(matches: Dict[str, str]) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for d, b in matches.items():
        out.setdefault(b, []).append(d)
    return out


def _claim(matches: Dict[str, str], unmatched: set, claimants: Dict[str, List[str]], debug: str, bench: str):
    """Match debug to bench. A debug node that held bench by an earlier manual match is left with none: falling
    back to its stored partner would bring back a pair the user had replaced."""
    for prev in claimants.pop(bench, []):
        if prev != debug:
            del matches[prev]
            unmatched.add(prev)
    old = matches.get(debug)
    if old is not None and old != bench:
        claimants[old].remove(debug)
    matches[debug] = bench
    claimants[bench] = [debug]
    unmatched.discard(debug)


def _neighbours(before: Overlay, debugs: List[str], benches: List[str]) -> Tuple[List[str], List[str]]:
    """The nodes whose counterpart an edit of these may change: they, their partners before it (stored or
    manual), and the stored partners of those partners, who get them back when a manual match lets go."""
    d_out, b_out = dict.fromkeys(debugs), dict.fromkeys(benches)
    for d in debugs:
        for b in (before.stored_counterpart(d), before.matches.get(d)):
            if b:
                b_out[b] = None
    for b in benches:
        for d in (before.stored_debug(b), before.claimed.get(b)):
            if d:
                d_out[d] = None
    given_b, given_d = set(benches), set(debugs)
    for b in [b for b in b_out if b not in given_b]:
        d = before.stored_debug(b)
        if d:
            d_out[d] = None
    for d in [d for d in d_out if d not in given_d]:
        b = before.stored_counterpart(d)
        if b:
            b_out[b] = None
    return list(d_out), list(b_out)


def _link_rows(ov: Overlay, npu, bench, step, rank):
    """(link, precision, step, rank, side, name, compare fields or None) of every node whose counterpart the
    edits change, the partners a match displaced included: the database must not keep a link to them."""
    for side, own, other in (("NPU", npu, bench), ("Bench", bench, npu)):
        for name, peer in sorted(ov.touched(side).items()):
            if name not in own.by_name or (peer is not None and peer not in other.by_name):
                continue  # a side-file name the graph does not hold: nothing to write
            if peer is not None and not ov.is_manual(side, name):
                continue  # its stored link stands
            yield _link_row(ov, side, name, peer, other, step, rank)


def _link_row(ov: Overlay, side, name, peer, other, step, rank):
    if peer is None:
        return "[]", None, step, rank, side, name, None
    prec, fields = None, None
    if side == "NPU":
        prec, ind, outd = recompute(ov.file, step, rank, name, peer, ov.task)
        fields = (ind, outd) if ind is not None and outd is not None else None
    return json.dumps(other.path(other.by_name[peer])), prec, step, rank, side, name, fields


def _stored_peer(gf, step, rank, name):
    try:
        link = gf.node(step, rank, "NPU", name).get("matched_node_link") or []
    except ApiError:
        return None
    return str(link[-1]) if link else None
