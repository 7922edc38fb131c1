"""LiveVisDb: the collector's per-rank build graph, written while training runs and read by TensorBoard meanwhile.

The file is created complete (schema, indexes, tb_config, tbprobe_meta) under a temporary name and renamed, so a
reader never finds a database without its tables. It stays in WAL mode: readers keep reading a consistent
snapshot while a step is written, and each `add_graph` is one transaction that also updates tb_config's
step_list / rank_list, so a reader sees either none or all of a step.
"""
import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from tbprobe.errors import FormatError
from tbprobe.formats._vis_sql import (
    INSERT_CONFIG,
    INSERT_EDGE,
    INSERT_META,
    INSERT_NODE,
    INSERT_NODE_EXT,
    INSERT_STACK,
    config_row,
    create_schema,
    meta_rows,
)

__all__ = ["LiveVisDb"]


class LiveVisDb:
    """LiveVisDb(path, task="summary"); .add_graph(node_rows, stack_rows, ext_rows, step, rank); .close()

    Opening an existing live database (e.g. a resumed run) appends to it; adding a step/rank again replaces that
    graph. Rows are in the same shapes as VisDbWriter takes (NODE_COLUMNS tuples, (id, stack_info), node_ext)."""

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        graph_type: str = "build",
        task: Optional[str] = "summary",
        tool_tip: Any = None,
        micro_steps: int = 1,
        overflow_check: bool = False,
        node_colors: Any = None,
    ):
        self.path = Path(path)
        # an existing database is an earlier run's (a resumed run): its graphs from this run's first step on are
        # of a timeline this run rewrites, dropped at the first add_graph (else a step this run's live graph skips
        # kept the killed run's graph beside the dump.json written again)
        self._resumed = self.path.exists()
        if not self._resumed:
            self._create(config_row(graph_type, task, tool_tip, micro_steps, overflow_check, node_colors, [], []))
        self.conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
        try:
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"tb_nodes", "tb_config", "tbprobe_meta"} <= tables:
                raise FormatError(self.path, "exists but is not a tbprobe live graph database (no tbprobe_meta)")
            self.conn.execute("PRAGMA journal_mode=WAL")
            # A lost last step on power failure is acceptable; an fsync per step is not needed for a debug graph.
            self.conn.execute("PRAGMA synchronous=NORMAL")
            if self._resumed:   # (a run resumed on an earlier run's database is written again)
                self.conn.executemany(INSERT_META, meta_rows({"live": "1"}))
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise FormatError(self.path, f"not a readable SQLite database ({exc})") from None
        except BaseException:
            self.conn.close()
            raise

    def _create(self, config: Sequence[Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            # (a rollback journal, not WAL, while it is made: the COMMIT then writes the file itself and fails on a
            # full disk, where a WAL's close failed to copy the log in without a word, and the rename put a
            # malformed database under the real name)
            conn.execute("BEGIN")
            create_schema(conn, with_indexes=True)
            conn.execute(INSERT_CONFIG, tuple(config))
            conn.executemany(INSERT_META, meta_rows({"live": "1"}))
            conn.execute("COMMIT")
            # WAL from here on (an empty log, nothing to copy in at close): the readers' open_db knows a live
            # writer by its -wal file, which a database still in rollback mode when first opened did not get
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()
            os.replace(tmp, self.path)
        except BaseException:
            conn.close()
            for suffix in ("", "-journal", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{tmp}{suffix}")
            raise

    def add_graph(
        self,
        node_rows: Iterable[Sequence[Any]],
        stack_rows: Iterable[Sequence[Any]],
        ext_rows: Iterable[Sequence[Any]],
        step: int,
        rank: int,
        side: str = "NPU",
        micro_steps: Optional[int] = None,
        edge_rows: Iterable[Sequence[Any]] = (),
        keep_steps: Optional[int] = None,
    ) -> None:
        """Write one step x rank graph in one transaction, replacing that graph if it was written before
        (`edge_rows`: its tbprobe_edges rows, the data flow). With `keep_steps`, the graphs of this rank and side
        beyond the last `keep_steps` steps are dropped in the same transaction."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._delete_graph(side, step, rank)
            if self._resumed:
                self._resumed = False
                for later in [r[0] for r in conn.execute(
                        "SELECT DISTINCT step FROM tb_nodes WHERE rank = ? AND data_source = ? AND step >= ?",
                        (rank, side, step))]:
                    self._delete_graph(side, later, rank)
            conn.executemany(INSERT_NODE, node_rows)
            conn.executemany(INSERT_STACK, stack_rows)
            conn.executemany(INSERT_NODE_EXT, ext_rows)
            conn.executemany(INSERT_EDGE, edge_rows)
            if keep_steps is not None:
                self._drop_old(side, rank, keep_steps)
            steps_text, ranks_text, ms = conn.execute(
                "SELECT step_list, rank_list, micro_steps FROM tb_config WHERE id = '1'").fetchone()
            steps = sorted(set(json.loads(steps_text or "[]")) | {step})
            if keep_steps is not None:
                # (the steps some rank still has: one database holds one rank's graphs, as the collector writes it)
                held = {r[0] for r in conn.execute("SELECT DISTINCT step FROM tb_nodes")}
                steps = [s for s in steps if s in held]
            ranks = sorted(set(json.loads(ranks_text or "[]")) | {rank})
            if micro_steps is not None:
                ms = max(int(ms or 0), int(micro_steps))
            conn.execute("UPDATE tb_config SET step_list = ?, rank_list = ?, micro_steps = ? WHERE id = '1'",
                         (json.dumps(steps), json.dumps(ranks), ms))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _delete_graph(self, side: str, step: int, rank: int) -> None:
        """The rows of one step x rank graph, in every table (inside the caller's transaction)."""
        conn = self.conn
        graph_id = f"{side}_{step}_{rank}"
        lo, hi = graph_id + "_", graph_id + "`"  # ids of this graph: '<graph_id>_...' ('`' follows '_')
        conn.execute("DELETE FROM tb_nodes WHERE step = ? AND rank = ? AND data_source = ?", (step, rank, side))
        conn.execute("DELETE FROM tb_stack WHERE id >= ? AND id < ?", (lo, hi))
        conn.execute("DELETE FROM tbprobe_node_ext WHERE id >= ? AND id < ?", (lo, hi))
        conn.execute("DELETE FROM tbprobe_edges WHERE graph_id = ?", (graph_id,))

    def _drop_old(self, side: str, rank: int, keep: int) -> None:
        # the last `keep` steps written, not the highest numbers: a run resumed at a lower step (set_init_step)
        # had each of its graphs dropped in the transaction that added it (rows get rising rowids as written)
        steps = [r[0] for r in self.conn.execute(
            "SELECT step FROM tb_nodes WHERE rank = ? AND data_source = ? GROUP BY step ORDER BY MAX(rowid) DESC",
            (rank, side))]
        for old in steps[max(keep, 1):]:
            self._delete_graph(side, old, rank)

    def close(self) -> None:
        """The writer is done: `live` is "0" from here on (a reader stops waiting for more steps; a killed
        process's database keeps its "1")."""
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.executemany(INSERT_META, meta_rows({"live": "0"}))
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self.conn.close()
            self.conn = None

    def __enter__(self) -> "LiveVisDb":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
