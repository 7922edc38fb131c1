"""Task tensor's files: their names in dump_tensor_data/, and how one is written so that a full disk says so."""
import errno
import hashlib
import os
import shutil
from typing import Any

import torch

__all__ = ["data_names", "save_tensor", "tensor_file_name"]


_NOT_IN_FILE_NAMES = str.maketrans({"/": "_", "\\": "_", "\0": "_"})


def data_names(value: Any):
    """The data_name of every item in a record's value (nested lists and dicts)."""
    if isinstance(value, dict):
        name = value.get("data_name")
        if isinstance(name, str):
            yield name
        for v in value.values():
            if isinstance(v, (dict, list)):
                yield from data_names(v)
    elif isinstance(value, list):
        for v in value:
            yield from data_names(v)


def tensor_file_name(key: str) -> str:
    """The file of a saved tensor in dump_tensor_data/: `<key>.pt`, the key being the record's name and the
    tensor's place. A key is user text (a save() name, a ModuleDict key such as "enc/0"): a path separator would
    make it a path, out of the dump (save("../../x")) or into a folder that is not there (which stopped the
    writer), so separators become "_"; a name too long for the file system is cut, with a hash of the whole."""
    name = key.translate(_NOT_IN_FILE_NAMES)
    if len(name.encode("utf-8")) > 200:
        digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]
        name = name.encode("utf-8")[:150].decode("utf-8", "ignore") + "-" + digest
    return name + ".pt"



def save_tensor(path: str, t: torch.Tensor) -> None:
    """torch.save through a file of ours: torch's own file writer reports a full disk as a RuntimeError of its
    internals ("unexpected pos"), which the writer took for one bad tensor, going on to the next; this way the
    OSError (ENOSPC) stops collection with its message. A file left half written is removed."""
    try:
        with open(path, "wb") as f:
            torch.save(t.cpu(), f)
    except BaseException as exc:
        try:
            os.remove(path)
        except OSError:
            pass
        # (a write the buffered file took in part still reaches torch's writer as a position it did not expect)
        if isinstance(exc, Exception) and not isinstance(exc, OSError) and _no_room(path, t):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from exc
        raise


def _no_room(path: str, t: torch.Tensor) -> bool:
    """Whether the file system of `path` lacks the room for `t`'s file."""
    try:
        return shutil.disk_usage(os.path.dirname(path)).free < t.numel() * t.element_size() + (1 << 16)
    except (OSError, RuntimeError):
        return False
