"""User edits kept beside the graph file, never inside it: manual matches and the colour legend.

- ``<tag>_<step>_<rank>.vis.config``: manual matches ``{debug_node: bench_node}`` (the reference plugin's file,
  name and format, so either tool can load the other's edits).
- ``<tag>_<step>_<rank>.vis.unmatch.json``: tbprobe's list of debug nodes whose stored match the user removed
  (the reference format has no way to say "unmatched").
- ``<file>.legend.json``: ``{"node_colors": {...}}`` the edited legend.
Writes go to a temporary file in the same folder and are renamed over the old one, so a crash never leaves half
a file; read-modify-write sequences of a graph file's side files are serialised by one lock. An apply (edits.py) folds the edits
into the database and retires their side files (renamed beside the database's backup).
"""
import json
import os
import tempfile
import threading
from typing import Dict, List

from tbprobe.tb_plugin.api_error import ApiError
from tbprobe.tb_plugin.catalog import tag_of

__all__ = ["SideFiles", "write_json_atomic", "matches_name", "unmatch_name", "legend_name"]

_MAX_SIDE_BYTES = 64 << 20


def matches_name(file: str, step: int, rank: int) -> str:
    return f"{tag_of(file)}_{step}_{rank}.vis.config"


def unmatch_name(file: str, step: int, rank: int) -> str:
    return f"{tag_of(file)}_{step}_{rank}.vis.unmatch.json"


def legend_name(file: str) -> str:
    return f"{file}.legend.json"


def write_json_atomic(path: str, value: object) -> None:
    """Write ``value`` to a new temporary file (created exclusively, never through a link) and rename it over
    ``path``. A link or a folder at ``path`` is refused (403), as reading one is: the rename would have replaced
    it without a word (or failed with a traceback, for a folder)."""
    if os.path.islink(path):
        raise ApiError(403, f"side file {os.path.basename(path)} is a symbolic link: refused")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise ApiError(403, f"side file {os.path.basename(path)} is not a regular file: refused")
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tbprobe-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_json(path: str, default):
    if not os.path.exists(path):
        return default
    if os.path.islink(path):
        raise ApiError(403, f"side file {os.path.basename(path)} is a symbolic link: refused")
    if os.path.getsize(path) > _MAX_SIDE_BYTES:
        raise ApiError(400, f"side file {os.path.basename(path)} is too large")
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"side file {os.path.basename(path)} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ApiError(400, f"side file {os.path.basename(path)} is nested too deeply") from None


# The side files of one graph file are edited one request at a time: its match, unmatch and legend edits and its
# applies take the lock of its stripe, a fixed set as the apply's are (edits.py): one lock per side-file name ever
# edited or applied (an apply names every step x rank's) grew without bound in a long-lived TensorBoard. Files
# sharing a stripe only wait for each other; each holder takes one stripe, so none waits on another in a cycle.
_LOCKS = tuple(threading.Lock() for _ in range(64))


class SideFiles:
    """Side files of graph files in a run folder (``folder`` is already checked to be inside the log dir)."""

    def __init__(self, folder: str, file: str):
        self.folder = folder
        self.file = file

    def lock(self) -> threading.Lock:
        """The lock of every side file of this graph file, for a read-modify-write of any of them. Its stripe is
        the hash of the real folder and the tag the side files are named after (``x.vis`` and ``x.vis.db`` share
        ``x_<step>_<rank>.vis.config``, so they share the lock too)."""
        key = os.path.join(os.path.realpath(self.folder), tag_of(self.file))
        return _LOCKS[hash(key) % len(_LOCKS)]

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def stamp(self, step: int, rank: int) -> tuple:
        """Changes whenever either match side file changes (cache key of what is derived from them)."""
        out = []
        for name in (matches_name(self.file, step, rank), unmatch_name(self.file, step, rank)):
            try:
                st = os.stat(self.path(name))
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def matches(self, step: int, rank: int) -> Dict[str, str]:
        value = _read_json(self.path(matches_name(self.file, step, rank)), {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ApiError(400, f"{matches_name(self.file, step, rank)}: expected {{debug_node: bench_node}}")
        return value

    def unmatched(self, step: int, rank: int) -> List[str]:
        value = _read_json(self.path(unmatch_name(self.file, step, rank)), [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ApiError(400, f"{unmatch_name(self.file, step, rank)}: expected a list of node names")
        return value

    def save_matches(self, step: int, rank: int, matches: Dict[str, str], unmatched: List[str]) -> None:
        write_json_atomic(self.path(matches_name(self.file, step, rank)), matches)
        upath = self.path(unmatch_name(self.file, step, rank))
        if unmatched:
            write_json_atomic(upath, sorted(set(unmatched)))
        elif os.path.exists(upath):
            os.unlink(upath)

    def legend(self) -> Dict[str, dict]:
        value = _read_json(self.path(legend_name(self.file)), {})
        colors = value.get("node_colors") if isinstance(value, dict) else None
        return colors if isinstance(colors, dict) else {}

    def save_legend(self, colors: Dict[str, dict]) -> None:
        write_json_atomic(self.path(legend_name(self.file)), {"node_colors": colors})
