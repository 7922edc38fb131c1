"""Which graph files the log directory holds: every ``.vis.db`` and legacy ``.vis`` at any depth.

Runs are folder paths relative to the log directory (``.`` for the log directory itself), so two folders of the
same name in different places never collide. The directory is walked again on each call: new files appear
without a restart. Symbolic links are not followed (a link could lead outside the log directory).
"""
import os
from dataclasses import dataclass
from typing import Dict, List, Tuple

from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.security import resolve_inside

__all__ = ["DB_SUFFIX", "VIS_SUFFIX", "FileEntry", "scan", "file_format", "resolve_file", "tag_of"]

DB_SUFFIX = ".vis.db"
VIS_SUFFIX = ".vis"
# A log directory may be a user's home: bound the walk so a scan never takes minutes.
_MAX_DIRS = 20000


@dataclass(frozen=True)
class FileEntry:
    run: str
    file: str
    format: str  # "db" | "vis"
    size: int
    mtime: float


def file_format(name: str) -> str:
    if name.endswith(DB_SUFFIX):
        return "db"
    if name.endswith(VIS_SUFFIX):
        return "vis"
    return ""


def tag_of(name: str) -> str:
    """The name without its graph suffix: side files are named after it (``<tag>_<step>_<rank>.vis.config``)."""
    for suffix in (DB_SUFFIX, VIS_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def scan(logdir: str) -> Dict[str, List[FileEntry]]:
    """run -> its graph files, sorted by name; runs sorted with ``.`` first."""
    root = os.path.realpath(logdir)
    runs: Dict[str, List[FileEntry]] = {}
    seen_dirs = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        seen_dirs += 1
        if seen_dirs > _MAX_DIRS:
            break
        # Hidden folders (.git, .venv, caches) never hold user graphs worth listing.
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        rel = "." if rel == "." else rel.replace(os.sep, "/")
        for name in sorted(filenames):
            fmt = file_format(name)
            if not fmt:
                continue
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            runs.setdefault(rel, []).append(FileEntry(rel, name, fmt, st.st_size, st.st_mtime))
    return dict(sorted(runs.items(), key=_run_sort_key))


def _run_sort_key(item: Tuple[str, object]) -> Tuple[int, str]:
    return (0 if item[0] == "." else 1, item[0])


def resolve_file(logdir: str, run: str, file: str) -> str:
    """The real path of a graph file named by a request; 400 for a bad name, 403 outside, 404 missing."""
    if not run:
        raise ApiError(400, "missing parameter: run")
    if not file:
        raise ApiError(400, "missing parameter: file")
    resolve_inside(logdir, run)  # a run outside the log directory is refused before anything else is said
    if "/" in file or "\\" in file:
        raise ApiError(403, "path refused: file must be a plain file name inside the run")
    path = resolve_inside(logdir, run, file)
    if not file_format(file):
        raise ApiError(400, f"not a graph file: {quoted(file)} (expected {DB_SUFFIX} or {VIS_SUFFIX})")
    if not os.path.isfile(path):
        if os.path.exists(path):  # (never opened: a FIFO would block the request)
            what = "a folder" if os.path.isdir(path) else "a FIFO, a device or a socket"
            raise ApiError(400, f"{file}: not a regular file ({what})")
        raise ApiError(404, f"no such graph file: {run}/{file}")
    return path
