"""The dumped tensor files a tensor-mode compare reads, read as a hostile dump cannot abuse them: a data_name is
looked up in its rank's own tensor folder only (absolute names, `..` and links that lead out are refused), only
regular files are opened (a FIFO hung the compare, /dev/zero grew it until it was killed), a .npy may not declare
more than it holds, a .pt goes through tbprobe's own reader (pt_reader) and only what it hands back through torch's
restricted loader; nothing is unpickled. What is refused raises TensorFileRefused, whose message the item's row
gets."""
import functools
import os
import stat
from typing import Optional

__all__ = ["TensorFileRefused", "tensor_file", "load_array"]


class TensorFileRefused(ValueError):
    """A data_name or tensor file that tbprobe does not read; the message says why (the item's row gets it)."""


@functools.lru_cache(maxsize=64)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def tensor_file(folder: Optional[str], name: object, side: str = "") -> str:
    """The file a dump item's data_name names in the rank's tensor folder, symbolic links resolved. Refused
    (TensorFileRefused) when the name is not a plain relative name or it leads out of the folder: an absolute
    name, `..` or a link to somewhere else (a dump names its own tensors, nothing else)."""
    who = f"{side} data_name" if side else "data_name"
    if not isinstance(name, str) or not name:
        raise TensorFileRefused(f"{who} {name!r} is not a file name")
    if "\0" in name:
        raise TensorFileRefused(f"{who} {name!r} holds a NUL character")
    if not folder:
        raise TensorFileRefused(f"{who} {name!r}: the dump has no tensor folder")
    if os.path.isabs(name):
        raise TensorFileRefused(f"{who} {name!r} is an absolute path: it leaves the dump's tensor folder")
    root = _real_folder(folder)
    real = os.path.realpath(os.path.join(folder, name))
    if real == root or os.path.commonpath((root, real)) != root:
        raise TensorFileRefused(f"{who} {name!r} leaves the dump's tensor folder")
    return real


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: str, mode: int) -> TensorFileRefused:
    kind = next((what for test, what in _KINDS if test(mode)), "")
    return TensorFileRefused(f"{os.path.basename(path)}: not a regular file" + (f" ({kind})" if kind else ""))


def _open_regular(path: str):
    """`path` opened for binary reading when it is a regular file: a FIFO, a device or a folder is refused before
    it is opened (a FIFO blocked the open for ever, /dev/zero grew the process until it was killed), and the
    open itself does not block (O_NONBLOCK) should the file be swapped for a FIFO in between (checked again on
    the open file). A missing file raises FileNotFoundError."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_array(path: str):
    """A dumped tensor as a float64 numpy array (.npy directly, .pt through torch). Only a regular file is
    read."""
    with _open_regular(path) as f:
        return _load_array(f, path)


def _npy_header(f, name: str) -> None:
    """Refuse a .npy whose header declares more data than the file holds (np.load allocated the whole declared
    array before reading: a 100-byte file could ask for terabytes), or Python objects (a pickle)."""
    import numpy as np
    from numpy.lib import format as npy

    version = npy.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = npy.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = npy.read_array_header_2_0(f)
    else:
        shape, _, dtype = npy._read_array_header(f, version)  # (3.0: no public reader)
    if dtype.hasobject:
        raise TensorFileRefused(f"{name}: holds Python objects (a pickle), which tbprobe does not unpickle")
    count = 1
    for s in shape:
        count *= int(s)
    need = count * dtype.itemsize
    have = os.fstat(f.fileno()).st_size - f.tell()
    if need > have:
        raise TensorFileRefused(f"{name}: declares an array of shape {list(shape)} and dtype {np.dtype(dtype).name} "
                                f"({need} bytes) but holds {max(have, 0)} bytes of data")


def _first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    text = text.split("  (Could this error message be improved?")[0]   # (torch's c10 errors end so)
    return text if len(text) <= 160 else text[:157] + "..."


def _torch_load(f, name: str):
    """What read_pt hands back, through torch.load(weights_only=True) (its restricted unpickler): a torch.save
    archive of a strided view, a complex tensor. Not a legacy pickle (torch.load took those, warning on stderr
    about their pickle protocol): tbprobe unpickles nothing. torch's warnings stay off stderr, and what it
    refuses is one short line in the row (its text ran to several paragraphs)."""
    import pickle
    import warnings
    import zipfile

    f.seek(0)
    if not zipfile.is_zipfile(f):
        f.seek(0)
        if f.read(1) == b"\x80":   # (the PROTO opcode that starts every pickle since protocol 2)
            raise TensorFileRefused(f"{name} is a legacy pickle, which tbprobe does not unpickle (torch.save's "
                                    "zip format since torch 1.6 is read)")
        raise TensorFileRefused(f"{name} is not a tensor file (neither torch.save's zip format nor .npy)")
    f.seek(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch  # only tensor mode needs torch; imported lazily to keep `tbprobe graph` start-up fast

        try:
            t = torch.load(f, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise TensorFileRefused(f"{name} holds objects other than a tensor, which tbprobe does not unpickle"
                                    ) from None
        except Exception as exc:
            raise TensorFileRefused(f"{name}: torch cannot read it ({_first_line(exc)})") from None
        if not isinstance(t, torch.Tensor):
            raise TensorFileRefused(f"{name} holds a {type(t).__name__}, not a tensor")
        if t.is_complex():
            t = t.abs()
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        return t.to(torch.float64).numpy()


def _load_array(f, path: str):
    import numpy as np

    from tbprobe.graph_builder.pt_reader import PtRefused

    arr = None
    name = os.path.basename(path)
    if path.endswith(".npy"):
        _npy_header(f, name)
        f.seek(0)
        arr = np.load(f, allow_pickle=False)
    else:
        from tbprobe.graph_builder.pt_reader import read_pt

        try:
            arr = read_pt(f)  # the common case without torch (seconds of import per worker)
        except PtRefused as exc:
            raise TensorFileRefused(f"{name}: {exc}") from None
    if arr is None:
        arr = _torch_load(f, name)
    if np.iscomplexobj(arr):
        arr = np.abs(arr)
    return np.asarray(arr, dtype=np.float64)
