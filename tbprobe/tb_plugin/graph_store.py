"""Read-only queries on one ``.vis.db`` (msprobe's or tbprobe's), safe to use from many threads at once.

TensorBoard serves each request on its own thread. Connections live in a small pool (taken and given back per
query) so threads never share one at the same time; the in-memory graph indexes are built once per graph under a
lock and then only read. Objects of this class are cached by the file's identity (path, mtime, size), so an
edited or replaced file is read afresh and an unchanged one is never re-read.
"""
import json
import logging
import os
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional, Tuple

from tbprobe.tb_plugin import index_cache, light_graph
from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.graph_index import GraphIndex, int_sql
from tbprobe.tb_plugin.request_params import INT32
from tbprobe.tb_plugin.sqlite_ro import file_identity, open_readonly
from tbprobe.tb_plugin.stored_metrics import (
    INF_TEXTS,
    LOWER_IS_WORSE,
    METRIC_FIELDS,
    NAN_TEXTS,
    MetricValue,
    metric_json,
    metric_number,
)

__all__ = ["DbGraphFile", "derived_estimate", "loads_or"]

logger = logging.getLogger(__name__)

_MAX_FEEDS = 200   # consumers listed for one node (a tensor many calls read: an embedding table, a mask)

_POOL_IDLE = 4
_SIDES = ("NPU", "Bench")


def loads_or(text: Optional[str], default):
    """JSON text from a database column; the default for NULL, '' or malformed text (never an exception)."""
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


_DIGITS = re.compile(r"[0-9]+")


def _ints(values, file: str, column: str) -> List[int]:
    """A tb_config list of numbers as ints; a 400 naming the column for anything else (a hostile or broken file
    answered 500 on every route). Text counts when it is ASCII digits: str.isdigit() also took "²", which int()
    then refused (a 500), and " 1 " and other scripts' digits."""
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, str) and not _DIGITS.fullmatch(v)):
            shown = quoted(v, 40) if isinstance(v, str) else repr(v)[:40]
            raise ApiError(400, f"{file}: tb_config {column} holds {shown}, not a step, rank or count")
        n = int(v)
        # (past what a request can name and SQLite can bind: 99999999999999999999 was listed, and the background
        # index of that step printed an OverflowError traceback on TensorBoard's console)
        if not INT32[0] <= n <= INT32[1]:
            raise ApiError(400, f"{file}: tb_config {column} holds {str(n)[:40]}, past the range of a step, rank or "
                                f"count ({INT32[0]} to {INT32[1]})")
        out.append(n)
    return out


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


_SCAN_CHUNK = 4096
_DERIVED_ENTRY = 400   # bytes per entry of a derived per-node table (a node's metrics dict, a compare row)
# A file this big, without a cached index, has its index built only once its first view has been answered (no
# light answer for _QUIET_S): on a busy machine the build's full read made those answers several times slower.
_BIG_FILE = 32 * 2 ** 20
_QUIET_S = 0.3
_MAX_DEFER_S = 5.0


# SQLite's primary result codes of a failure that says nothing lasting about the file: another connection holds it
# (an apply writing it with a rollback journal), memory or the disk ran out, an I/O error, the file could not be
# opened just now, its schema changed under the reader. Such a failure is answered 503 and not remembered; the
# others (malformed, not a database, a column or table missing) stay true until the file changes.
_TRANSIENT_SQLITE = {5, 6, 7, 9, 10, 13, 14, 15, 17}   # BUSY LOCKED NOMEM INTERRUPT IOERR FULL CANTOPEN PROTOCOL SCHEMA


def _transient(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # (raised by the sqlite3 module itself)
        return isinstance(exc, sqlite3.OperationalError) and not str(exc).startswith("no such")
    return code & 0xFF in _TRANSIENT_SQLITE


def _retry_error(name: str, what: str) -> ApiError:
    return ApiError(503, f"{name}: {what}; try again")


def derived_estimate(values) -> int:
    """About how many bytes the derived tables of an open file hold: those that measure themselves (the compare
    table, one dict of every column per compared item: the largest of a big compare file, left out before),
    and so many entries of a per-node dict or list."""
    total = 0
    for value in values:
        measure = getattr(value, "memory_estimate", None)
        if callable(measure):
            total += measure()
        elif isinstance(value, (dict, list)):
            total += _DERIVED_ENTRY * len(value)
    return total


class _Foreground:
    """Counts light first-view answers in progress. A background index build holds the GIL for most of its work
    and, on a busy machine, made the very answers meant to spare the user its wait several times slower: between
    chunks of its scan it waits (at most a second at a time) while any is in progress."""

    def __init__(self):
        self._busy = 0
        self._last = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def active(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._last = time.monotonic()

    def quiet_for(self, seconds: float) -> bool:
        return not self._busy and time.monotonic() - self._last >= seconds

    def wait_idle(self, limit_s: float = 1.0) -> None:
        deadline = time.monotonic() + limit_s
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.002)


_FOREGROUND = _Foreground()


class DbGraphFile:
    """One ``.vis.db`` file."""

    def __init__(self, path: str, identity: tuple = ()):
        self.path = path
        self.identity = identity or file_identity(path)
        # Results derived from the whole graph (compare table, metrics), filled by queries.py on first use.
        self.derived: dict = {}
        self.derived_lock = threading.Lock()
        self._idle: List[sqlite3.Connection] = []
        self._closed = False
        self._pool_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._building: Dict[tuple, threading.Lock] = {}
        self._indexes: Dict[tuple, GraphIndex] = {}
        self._build_done: Dict[tuple, Tuple[threading.Event, float, bool]] = {}
        self._failed: Dict[tuple, ApiError] = {}
        self._bg_errors: Dict[tuple, BaseException] = {}   # a background build's error not kept in _failed
        with self._conn() as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"tb_nodes", "tb_config"} <= tables:
            raise ApiError(400, f"{path.rsplit('/', 1)[-1]}: not a graph database (no tb_nodes/tb_config tables)")
        self.tables = tables
        self._meta = self._read_meta()

    # --- connections -----------------------------------------------------------------------------------------
    @contextmanager
    def _conn(self, pool: bool = True) -> Iterator[sqlite3.Connection]:
        """A pooled connection (``pool=False``: a new one, closed after use)."""
        conn = None
        if pool:
            with self._pool_lock:
                conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = open_readonly(self.path)
        try:
            yield conn
        except sqlite3.DatabaseError as exc:
            conn.close()
            conn = None
            name = self.path.rsplit('/', 1)[-1]
            if _transient(exc):
                raise _retry_error(name, f"the database could not be read just now ({exc})") from None
            raise ApiError(400, f"{name}: database read failed ({exc})") from None
        finally:
            if conn is not None:
                with self._pool_lock:
                    # (not into the pool of a closed file: nobody would close it, and an open reader keeps the
                    # -wal and -shm of a WAL database beside it for good)
                    if pool and not self._closed and len(self._idle) < _POOL_IDLE:
                        self._idle.append(conn)
                        conn = None
                if conn is not None:
                    conn.close()

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            for conn in self._idle:
                conn.close()
            self._idle.clear()

    # --- file-level facts ------------------------------------------------------------------------------------
    def _read_meta(self) -> dict:
        with self._conn() as conn:
            conn.row_factory = sqlite3.Row
            try:
                row = conn.execute("SELECT * FROM tb_config LIMIT 1").fetchone()
            finally:
                conn.row_factory = None
            meta_rows: Dict[str, str] = {}
            if "tbprobe_meta" in self.tables:
                meta_rows = dict(conn.execute("SELECT key, value FROM tbprobe_meta").fetchall())
            if row is None:
                raise ApiError(400, f"{self.path.rsplit('/', 1)[-1]}: empty tb_config table")
            cfg = dict(row)
            steps = loads_or(cfg.get("step_list"), None)
            ranks = loads_or(cfg.get("rank_list"), None)
            if not isinstance(steps, list) or not steps:
                steps = [r[0] for r in conn.execute("SELECT DISTINCT step FROM tb_nodes ORDER BY step")]
            if not isinstance(ranks, list) or not ranks:
                ranks = [r[0] for r in conn.execute("SELECT DISTINCT rank FROM tb_nodes ORDER BY rank")]
        graph_type = cfg.get("graph_type") or "build"
        schema_version = meta_rows.get("schema_version")
        name = self.path.rsplit('/', 1)[-1]
        return {
            "graph_type": graph_type,
            "task": cfg.get("task") or "",
            "steps": _ints(steps, name, "step_list"),
            "ranks": _ints(ranks, name, "rank_list"),
            "micro_steps": _ints([cfg.get("micro_steps") or 1], name, "micro_steps")[0],
            "overflow_check": bool(cfg.get("overflow_check")),
            "sides": ["NPU", "Bench"] if graph_type == "compare" else ["NPU"],
            "node_colors": _dict(loads_or(cfg.get("node_colors"), {})),  # build graphs store JSON null
            "tool_tip": _dict(loads_or(cfg.get("tool_tip"), {})),
            "writer": "tbprobe" if "tbprobe_meta" in self.tables else "msprobe",
            "schema_version": int(schema_version) if _DIGITS.fullmatch(str(schema_version or "")) else None,
            # written by the collector while training runs (formats/live_vis_db.py): its steps change
            "live": meta_rows.get("live") == "1",
            # the build's `--strict-dtype` (a manual match is compared again as it graded); files without the
            # row (older tbprobe's, the reference's) were graded by the default
            "strict_dtype": meta_rows.get("strict_dtype") == "1",
        }

    def meta(self) -> dict:
        return dict(self._meta)

    def memory_estimate(self) -> int:
        """About how many bytes this open file holds: its graph indexes and the per-node tables derived from them
        (metrics, compare rows), for the open-file cache's budget (graph_files.py)."""
        with self._index_lock:
            total = sum(idx.memory_estimate() for idx in self._indexes.values())
        with self.derived_lock:
            derived = list(self.derived.values())
        return total + derived_estimate(derived)

    # --- one graph -------------------------------------------------------------------------------------------
    def index(self, step: int, rank: int, side: str) -> GraphIndex:
        """The in-memory index of one graph, built on first use (one builder per graph, others wait).

        A failure the file itself causes (malformed, not a database, a wrong schema: a 4xx) is kept until the file
        changes. One that may pass (a locked database, memory, an I/O error: a 503) and a bug (a 500 once it
        reaches the route) are raised to this request alone: the next one builds again."""
        key = (step, rank, side)
        with self._index_lock:
            found = self._indexes.get(key)
            if found is not None:
                return found
            lock = self._building.setdefault(key, threading.Lock())
        with lock:
            with self._index_lock:
                found = self._indexes.get(key)
                failed = self._failed.get(key)
            if failed is not None:
                raise failed
            if found is None:
                try:
                    found = self._build_index(step, rank, side)
                except ApiError as exc:
                    if exc.status >= 500:
                        raise
                    failed = exc
                except (MemoryError, OSError) as exc:
                    raise _retry_error(os.path.basename(self.path),
                                       f"the graph's index could not be built just now ({type(exc).__name__})") \
                        from None
                if failed is not None:
                    # (once: a damaged file was answered "partial" for ever, its index rebuilt in vain on each
                    # read; the file changed is another object, tried afresh)
                    with self._index_lock:
                        self._failed[key] = failed
                    raise failed
                with self._index_lock:
                    self._indexes[key] = found
        return found

    def index_failure(self, step: int, rank: int, side: str) -> Optional[ApiError]:
        """Why this graph's index could not be built, or None (not tried yet, in progress or built)."""
        with self._index_lock:
            return self._failed.get((step, rank, side))

    def _build_index(self, step: int, rank: int, side: str) -> GraphIndex:
        cached = index_cache.load(self.identity, (step, rank, side))
        if isinstance(cached, GraphIndex):
            return cached
        built = self._scan_index(step, rank, side)
        index_cache.store(self.identity, (step, rank, side), built)
        return built

    def index_if_ready(self, step: int, rank: int, side: str, wait_s: float) -> Optional[GraphIndex]:
        """The index of a graph if it is built or gets built within ``wait_s``; its build is started in the
        background either way (a small graph is ready at once, a big one answers its first view lightly)."""
        key = (step, rank, side)
        with self._index_lock:
            found = self._indexes.get(key)
            if found is not None:
                return found
            event, started, deferred = self._build_done.get(key, (None, 0.0, False))
            start = event is None
            if start:
                deferred = self._defer_build(key)
                event, started = threading.Event(), time.monotonic()
                self._build_done[key] = (event, started, deferred)
        if start:
            def run():
                try:
                    if deferred:  # until the first view has been answered and things are quiet
                        while time.monotonic() - started < _MAX_DEFER_S and (
                                time.monotonic() - started < _QUIET_S or not _FOREGROUND.quiet_for(_QUIET_S)):
                            time.sleep(0.02)
                    self.index(step, rank, side)
                except Exception as exc:  # noqa: BLE001 - the request that needs the index reports the problem
                    if not isinstance(exc, ApiError):
                        logger.exception("graph_ascend: index of %s failed", self.path)
                    with self._index_lock:
                        self._bg_errors[key] = exc
                finally:
                    event.set()
            threading.Thread(target=run, name="graph_ascend-index", daemon=True).start()
        # Counted from the start of the build: the second request of a first view does not wait again; a deferred
        # build (big file) is not waited for at all.
        if not deferred:
            event.wait(max(0.0, started + wait_s - time.monotonic()))
        with self._index_lock:
            failed = self._failed.get(key)
            if failed is not None:
                raise failed
            found = self._indexes.get(key)
            if found is None and event.is_set():
                # The build ended with neither an index nor a kept failure (a transient error, a bug): this request
                # answers its error, the next one builds again (it was "partial" for good).
                self._build_done.pop(key, None)
                error = self._bg_errors.pop(key, None)
                if error is not None:
                    raise error
            return found

    def _defer_build(self, key: tuple) -> bool:
        try:
            big = os.path.getsize(self.path) >= _BIG_FILE
        except OSError:
            return False
        return big and not index_cache.exists(self.identity, key)

    def light_eligible(self, step: int, rank: int, side: str) -> bool:
        """Whether light_graph's first-view answers are exact for this graph (checked once, on indexes)."""
        key = ("light", step, rank, side)
        with self.derived_lock:
            found = self.derived.get(key)
        if found is None:
            with self._conn() as conn:
                found = light_graph.eligible(conn, step, rank, side)
            with self.derived_lock:
                self.derived[key] = found
        return found

    def light_root(self, step: int, rank: int, side: str) -> dict:
        # Not counted as foreground work: one indexed row, and the page polls it until the index is ready.
        with self._conn() as conn:
            return light_graph.root_summary(conn, step, rank, side, os.path.basename(self.path))

    def light_children(self, step: int, rank: int, side: str, node: str, micro_step: int) -> List[dict]:
        with _FOREGROUND.active(), self._conn() as conn:
            return light_graph.child_summaries(conn, step, rank, side, node, micro_step,
                                               os.path.basename(self.path))

    def prefetch(self, step: int, rank: int, sides) -> None:
        """Build the indexes of a graph in the background (the page asks for them right after the meta). One
        thread per side: SQLite reads without the GIL, so the two scans overlap."""
        for side in sides:
            try:
                self.index_if_ready(step, rank, side, 0.0)
            except Exception:  # noqa: BLE001 - a graph that cannot be read: its own reads say so, the meta stands
                pass

    def _scan_index(self, step: int, rank: int, side: str) -> GraphIndex:
        ext = "tbprobe_node_ext" in self.tables
        sql = (
            f"SELECT n.node_name, {int_sql('n.node_type')}, n.up_node, n.precision_index,"
            " CASE n.overflow_level WHEN 'medium' THEN 1 WHEN 'high' THEN 2 WHEN 'critical' THEN 3 ELSE 0 END,"
            f" {int_sql('n.micro_step_id')},"
            " (n.matched_node_link IS NOT NULL AND n.matched_node_link NOT IN ('', '[]')),"
            + (f" {int_sql('e.exec_order')} FROM tb_nodes n LEFT JOIN tbprobe_node_ext e ON e.id = n.id" if ext else
               " NULL FROM tb_nodes n")
            + " WHERE n.step = ? AND n.rank = ? AND n.data_source = ? ORDER BY n.node_order"
        )
        with self._conn(pool=False) as conn:
            # On a connection of its own, closed after the scan (it reads the whole graph once). Never memory-mapped
            # (PRAGMA mmap_size): a file truncated in place while mapped killed TensorBoard with SIGBUS; read()
            # calls see the shorter file and SQLite answers "malformed", a 400.
            cursor = conn.execute(sql, (step, rank, side))
            rows: list = []
            while True:  # in chunks, stepping aside while a first view is being answered (see _Foreground)
                chunk = cursor.fetchmany(_SCAN_CHUNK)
                if not chunk:
                    break
                rows.extend(chunk)
                _FOREGROUND.wait_idle()
        if not rows:
            raise ApiError(404, f"no graph for step {step}, rank {rank}, side {side} in this file")
        return GraphIndex(rows, compare=self._meta["graph_type"] == "compare", source=os.path.basename(self.path))

    def node(self, step: int, rank: int, side: str, name: str) -> dict:
        """Every stored field of one node, JSON columns decoded."""
        with self._conn() as conn:
            conn.row_factory = sqlite3.Row
            try:
                row = conn.execute(
                    "SELECT * FROM tb_nodes WHERE step = ? AND rank = ? AND data_source = ? AND node_name = ?",
                    (step, rank, side, name),
                ).fetchone()
                stack: List[str] = []
                # (tb_stack a table: a VIEW of that name may never end, and hung the node's request)
                if row is not None and row["stack_id"] and "tb_stack" in self.tables:
                    srow = conn.execute("SELECT stack_info FROM tb_stack WHERE id = ?", (row["stack_id"],)).fetchone()
                    stack = loads_or(srow[0], []) if srow else []
            finally:
                conn.row_factory = None
        if row is None:
            raise ApiError(404, f"no node named {quoted(name)} in this graph")
        out = dict(row)
        out["matched_node_link"] = loads_or(out.get("matched_node_link"), [])
        out["matched_distributed"] = loads_or(out.get("matched_distributed"), {})
        out["parallel_merge_info"] = loads_or(out.get("parallel_merge_info"), [])
        out["input_data"] = loads_or(out.get("input_data"), {})
        out["output_data"] = loads_or(out.get("output_data"), {})
        out["stack"] = stack if isinstance(stack, list) else []
        return out

    def data_rows(self, step: int, rank: int, side: str) -> Iterator[Tuple[str, int, dict, dict]]:
        """(name, node_order, input_data, output_data) of every node that carries data, in node order."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT node_name, node_order, input_data, output_data FROM tb_nodes"
                " WHERE step = ? AND rank = ? AND data_source = ? ORDER BY node_order",
                (step, rank, side),
            ).fetchall()
        for name, order, inp, outp in rows:
            if inp or outp:
                yield name, order, loads_or(inp, {}), loads_or(outp, {})

    def metric_table(self, step: int, rank: int, side: str, fields=METRIC_FIELDS) -> Dict[str, Dict[str, MetricValue]]:
        """node name -> {metric: its worst output figure} for ``fields``, as row_metrics gives it for one row.

        All in SQLite (json_tree walks each JSON text once, in C; numbers are parsed in SQL): MAX over a severity
        (text sorts above every number in SQLite, so "b" for NaN above "a" for an infinity above the finite
        values' magnitudes) picks each metric's worst output, and the bare ``t.atom`` is that output's value as
        stored (SQLite takes a bare column from the row of the single MAX). ``14.2%`` gives 14.2; text such as
        ``N/A`` gives no value. parameters_grad nodes, which have no outputs, are read by their gradients.
        """
        out: Dict[str, Dict[str, MetricValue]] = {}
        marks = ",".join("?" * len(fields))
        text = "trim(rtrim(trim(t.atom), '%'))"
        number = (f"CASE WHEN t.type IN ('integer', 'real') THEN t.atom"
                  f" WHEN t.type = 'text' AND {text} GLOB '*[0-9]*' AND NOT {text} GLOB '*[^-+.0-9eE]*'"
                  f" THEN CAST({text} AS REAL) END")
        quoted = lambda values: ",".join(f"'{v}'" for v in values)  # noqa: E731 - fixed names, no user text
        severity = (f"CASE WHEN t.type = 'text' AND lower({text}) IN ({quoted(NAN_TEXTS)}) THEN 'b'"
                    f" WHEN t.type = 'text' AND lower({text}) IN ({quoted(INF_TEXTS)}) THEN 'a'"
                    f" WHEN t.key IN ({quoted(LOWER_IS_WORSE)}) THEN -({number}) ELSE abs({number}) END")
        # (a parameters_grad node's gradients are stored with its inputs, and it has no outputs)
        grads = ("instr(n.node_name, '.parameters_grad.') > 0"
                 " AND (n.output_data IS NULL OR trim(n.output_data) IN ('', '{}', 'null'))")
        with self._conn() as conn:
            for column, where in (("output_data", ""), ("input_data", f" AND {grads}")):
                rows = None
                # A malformed JSON text anywhere makes json_tree raise: then use the query that checks each text.
                for source in (f"n.{column}", f"CASE WHEN json_valid(n.{column}) THEN n.{column} ELSE '{{}}' END"):
                    sql = (f"SELECT n.node_name, t.key, MAX({severity}), t.atom"
                           f" FROM tb_nodes n, json_tree({source}) t"
                           f" WHERE n.step = ? AND n.rank = ? AND n.data_source = ?{where} AND t.key IN ({marks})"
                           " GROUP BY n.node_order, t.key")
                    try:
                        rows = conn.execute(sql, (step, rank, side, *fields)).fetchall()
                        break
                    except sqlite3.OperationalError:
                        continue
                for name, key, worst, atom in rows or ():
                    value = metric_number(atom) if worst is not None else None
                    if value is not None:
                        out.setdefault(name, {})[key] = metric_json(value)
        return out

    def data_flow(self, step: int, rank: int, side: str, name: str) -> Optional[Dict[str, List[dict]]]:
        """The node's data-flow links (tbprobe_edges, from the collector's dataflow.json): the records that made
        its inputs, by input slot (`fed_by`), and the ones its outputs went into (`feeds`). None for files
        without the table and for the bench side, whose edges are not stored."""
        if "tbprobe_edges" not in self.tables or side != "NPU":
            return None
        graph_id = f"NPU_{step}_{rank}"
        with self._conn() as conn:
            fed_by = conn.execute("SELECT dst_slot, src FROM tbprobe_edges WHERE graph_id = ? AND dst = ? "
                                  "ORDER BY rowid", (graph_id, name)).fetchall()
            feeds = conn.execute("SELECT dst_slot, dst FROM tbprobe_edges WHERE graph_id = ? AND src = ? "
                                 "ORDER BY rowid LIMIT ?", (graph_id, name, _MAX_FEEDS + 1)).fetchall()
        return {"fed_by": [{"slot": str(slot), "node": str(node)} for slot, node in fed_by],
                "feeds": [{"slot": str(slot), "node": str(node)} for slot, node in feeds[:_MAX_FEEDS]],
                "feeds_truncated": len(feeds) > _MAX_FEEDS}

    def run_first_divergence(self) -> Optional[Dict[str, object]]:
        """The file's first divergence over every step x rank graph, by the graph builder's rule for the run (the
        summary's "first divergent node"): the earliest step with one, then the earliest in its rank's execution
        order, then the lowest rank. `{"step", "rank", "name", "exec_order"}`, or None (none stored, or a file
        without tbprobe's table: msprobe's files would need every graph's rows read, so they get none)."""
        if "tbprobe_findings" not in self.tables:
            return None
        with self._conn() as conn:
            rows = conn.execute("SELECT graph_id, node_name, exec_order, detail FROM tbprobe_findings "
                                "WHERE kind = 'first_divergence'").fetchall()
        best = None
        for graph_id, name, order, detail in rows:
            parts = str(graph_id).split("_")
            if len(parts) != 3 or parts[0] != "NPU" or not all(_DIGITS.fullmatch(p) for p in parts[1:]) \
                    or not isinstance(name, str):
                continue   # (a hand-made row: not a graph of this file's shape)
            step, rank = int(parts[1]), int(parts[2])
            # (as the summary: within a step a warning-only finding never outranks another rank's error)
            key = (step, _warning_only(detail), order if isinstance(order, int) else float("inf"), rank)
            if best is None or key < best[0]:
                best = (key, {"step": step, "rank": rank, "name": name,
                              "exec_order": order if isinstance(order, int) else None})
        return best[1] if best else None

    def stored_findings(self, step: int, rank: int) -> Optional[Dict[str, dict]]:
        """tbprobe's precomputed findings for the debug graph, or None for files without the table and for the
        collector's live graph (computed then, as for msprobe's files)."""
        if "tbprobe_findings" not in self.tables:
            return None
        with self._conn() as conn:
            if "tbprobe_meta" in self.tables and conn.execute(
                    "SELECT 1 FROM tbprobe_meta WHERE key = 'live'").fetchone() is not None:
                # (the collector's live graph, running or ended, stores none: its empty table read as "no first
                # overflow", and the Overflow view flagged no start for an fp16 run's overflowing linear)
                return None
            rows = conn.execute(
                "SELECT kind, node_name, exec_order, detail FROM tbprobe_findings WHERE graph_id = ?",
                (f"NPU_{step}_{rank}",),
            ).fetchall()
        return {kind: {"name": name, "exec_order": order, "detail": loads_or(detail, detail)}
                for kind, name, order, detail in rows}


def _warning_only(detail: object) -> bool:
    """A stored first divergence the builder chose by its warnings fallback (files before session 25: by its rule)."""
    found = loads_or(detail, None) if isinstance(detail, str) else detail
    if not isinstance(found, dict):
        return False
    flag = found.get("warning_only")
    return flag if isinstance(flag, bool) else found.get("rule") == "earliest_warning"
