"""Built graph indexes kept on disk between server runs, outside the user's log directory.

Building the index of a 100k-node graph means scanning every row once (about a second); loading a pickled one
takes a few tens of milliseconds, so a restarted TensorBoard opens big graphs at once. The cache lives in a
private folder under the system temp dir (mode 0700, owned by this user, never a symlink: a pickle is code, so
nobody else may write there); entries are keyed by the file's identity, so an edited file is never served stale.
Any problem with the cache just means building afresh.
"""
import hashlib
import os
import pickle
import tempfile
from typing import Optional

__all__ = ["load", "store", "exists", "cache_dir"]

_VERSION = 3   # 3: parent cycles hang under the root, names must be text; 2: indexes refuse wrongly typed integers (1 read 'abc' as 0)
_MAX_FILES = 64


def cache_dir() -> Optional[str]:
    path = os.environ.get("TBPROBE_PLUGIN_CACHE") or os.path.join(
        tempfile.gettempdir(), f"tbprobe-plugin-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    if path.lower() in ("", "0", "off", "none"):
        return None
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if os.path.islink(path) or (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
            return None
    except OSError:
        return None
    return path


def _key_path(identity: tuple, graph: tuple) -> Optional[str]:
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(repr((_VERSION, identity, graph)).encode("utf-8")).hexdigest()[:40]
    return os.path.join(folder, digest + ".pickle")


def exists(identity: tuple, graph: tuple) -> bool:
    path = _key_path(identity, graph)
    return path is not None and os.path.isfile(path)


def load(identity: tuple, graph: tuple):
    path = _key_path(identity, graph)
    if path is None or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # noqa: BLE001 - a damaged cache entry is rebuilt
        return None


def store(identity: tuple, graph: tuple, value) -> None:
    path = _key_path(identity, graph)
    if path is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        _trim(os.path.dirname(path))
    except Exception:  # noqa: BLE001 - the cache is an optimisation only
        return


def _trim(folder: str) -> None:
    entries = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".pickle")]
    if len(entries) <= _MAX_FILES:
        return
    entries.sort(key=lambda p: os.path.getmtime(p))
    for old in entries[: len(entries) - _MAX_FILES]:
        try:
            os.unlink(old)
        except OSError:
            pass
