"""The live build graph: one `.vis.db` per rank, updated when a step's files are written, readable meanwhile.

It lives in `<dump_path>_tb/` (beside the dump, since msprobe refuses a dump folder holding anything but step
folders), with the health event files: `tensorboard --logdir <dump_path>_tb` shows both while training runs.
Uses the graph builder's `build_rank_tables` (nodes, stacks and the data-flow edges, which the TensorBoard plugin
draws) and the formats' `LiveVisDb` (each step one transaction: a reader never sees half a step).
Framework-neutral.
"""
import errno
import glob
import logging
import os
import re
from pathlib import Path
from typing import Dict, Set

__all__ = ["LiveGraph", "side_dir", "KEEP_STEPS"]

log = logging.getLogger("tbprobe.collector")


# The live graph holds the last KEEP_STEPS steps it was given; older ones are dropped (their rows' pages reused), so
# a long run's database stays a few graphs big: one graph per interval, kept, grew by 7.5 MB/s on a 10k-node model.
# The dump keeps every step: `tbprobe graph` builds any of them.
KEEP_STEPS = 8


def side_dir(dump_path: str) -> str:
    """The folder beside the dump for tbprobe's own outputs (live graph, event files)."""
    return os.path.normpath(dump_path) + "_tb"


class LiveGraph:
    def __init__(self, dump_path: str) -> None:
        self.dir = side_dir(dump_path)
        self._dbs: Dict[str, object] = {}
        self._labels: Set[str] = set()   # every database this process made or tried to make (remove() deletes them)
        self.available = True

    def update(self, rank_dir: str, step: int) -> None:
        if not self.available:
            return
        try:
            from tbprobe.formats.dump_dir import RankDir
            from tbprobe.formats.live_vis_db import LiveVisDb
            from tbprobe.graph_builder import api
        except ImportError as exc:
            self.available = False
            log.warning("tbprobe: no live graph (%s)", exc)
            return
        label = os.path.basename(rank_dir)
        m = re.match(r"rank(\d+)$", label)
        rank = int(m.group(1)) if m else 0
        path = Path(rank_dir)
        rd = RankDir(step=step, rank=rank, path=path, dump_json=path / "dump.json",
                     construct_json=path / "construct.json", stack_json=path / "stack.json", label=label)
        # (with the overflow levels, as `tbprobe graph -oc` grades them: an fp16 run's overflowing steps showed no
        # level in the live graph, nor an Overflow view; the grading costs about a tenth of the rebuild)
        nodes, stacks, ext, edges = api.build_rank_tables(rd, overflow_check=True)
        db = self._dbs.get(label)
        if db is not None and not db.path.exists():
            # (the folder was deleted mid-run, as a dump folder may be: a new database, not writes to a lost file)
            db.close()
            db = None
        try:
            if db is None:
                self._labels.add(label)
                os.makedirs(self.dir, exist_ok=True)
                db = LiveVisDb(os.path.join(self.dir, f"build_{label}.vis.db"), overflow_check=True)
                self._dbs[label] = db
            db.add_graph(nodes, stacks, ext, step=step, rank=rank, edge_rows=edges, keep_steps=KEEP_STEPS)
        except Exception as exc:
            # SQLite may say "disk I/O error" (or the database is unreadable) where the disk is full: said as what
            # it is, so the caller switches the live graph off and frees its room
            if _no_room(self.dir):
                raise OSError(errno.ENOSPC, f"no room left under {self.dir}") from exc
            raise

    def close(self) -> None:
        for db in self._dbs.values():
            try:
                db.close()
            except Exception:
                pass
        self._dbs.clear()

    def remove(self) -> None:
        """Close and delete the databases (and their journals): the room they take is the dump's again."""
        self.close()
        self.available = False
        for label in self._labels:
            path = os.path.join(self.dir, f"build_{label}.vis.db")
            # (a database being made, under its temporary name, and the journals of both)
            for f in [path] + glob.glob(glob.escape(path) + ".tmp-*"):
                for suffix in ("", "-journal", "-wal", "-shm"):
                    try:
                        os.unlink(f"{f}{suffix}")
                    except OSError:
                        pass


def _no_room(folder: str) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 256 * 1024
