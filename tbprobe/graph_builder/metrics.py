"""Per-item metrics: statistics differences, checksum equality and real-data (tensor) metrics.

Each function returns the compare fields of one item pair as strings, in the reference's formats:
statistics diffs as Python floats ("0.05"), relative errors as "12.345678%" ("0.0%" when equal, "N/A" when the
bench value is 0), tensor metrics rounded to 12 decimals (EucDist unrounded), "unsupported" where a metric does
not apply (0-dim tensors, non-tensor arguments)."""
import functools
import math
import os
import stat
from typing import Dict, Optional, Tuple

from tbprobe.graph_builder.items import scalar_md5, to_str

__all__ = ["STAT_FIELDS", "TENSOR_FIELDS", "stat_fields", "tensor_metrics", "unsupported_tensor_fields",
           "na_tensor_fields", "rel_err_value", "load_array", "EPS", "TensorFileRefused", "tensor_file",
           "tensor_pair_metrics"]

STAT_FIELDS = ("Max diff", "Min diff", "Mean diff", "L2norm diff",
               "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")
TENSOR_FIELDS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                 "Five Thousandths Err Ratio")
_STATS = ("Max", "Min", "Mean", "Norm")
# A zero bench element is divided by float32 epsilon instead of 0, so it gives a large finite error.
EPS = 1.1920928955078125e-07  # numpy.finfo(numpy.float32).eps, without importing numpy for statistics mode


def _stat(x, y) -> Tuple[str, str, Optional[float]]:
    """(diff text, relative error text, relative error as a fraction or None) of one statistic."""
    tx = type(x)
    ty = type(y)
    # bool is not a number here (type(True) is bool, not int): flags get N/A, as the reference does
    if (tx is float or tx is int) and (ty is float or ty is int):
        diff = x - y
        text = float.__repr__(diff) if type(diff) is float else int.__repr__(diff)
        if y == 0:
            return text, "N/A", None
        if diff == 0:
            return text, "0.0%", 0.0
        rel = abs(diff / y)
        return text, _percent(rel * 100), rel
    return "N/A", "N/A", None


def stat_fields(debug: dict, bench: dict) -> Tuple[Dict[str, str], Optional[float]]:
    """Statistics-mode fields of one pair and the NormRelativeErr as a fraction (None when not a number)."""
    if "value" in debug:
        v = debug.get("value")
        dmax = dmin = dmean = dnorm = v
    else:
        dmax, dmin, dmean, dnorm = debug.get("Max"), debug.get("Min"), debug.get("Mean"), debug.get("Norm")
    if "value" in bench:
        v = bench.get("value")
        bmax = bmin = bmean = bnorm = v
    else:
        bmax, bmin, bmean, bnorm = bench.get("Max"), bench.get("Min"), bench.get("Mean"), bench.get("Norm")
    d0, r0, _ = _stat(dmax, bmax)
    d1, r1, _ = _stat(dmin, bmin)
    d2, r2, _ = _stat(dmean, bmean)
    d3, r3, norm_rel = _stat(dnorm, bnorm)
    return {"Max diff": d0, "Min diff": d1, "Mean diff": d2, "L2norm diff": d3, "MaxRelativeErr": r0,
            "MinRelativeErr": r1, "MeanRelativeErr": r2, "NormRelativeErr": r3}, norm_rel


def _percent(value: float) -> str:
    """The reference writes whole percentages as "100.0%" and others with six decimals ("12.345678%")."""
    if value.is_integer():
        return float.__repr__(float(value)) + "%"
    return "%.6f%%" % value


def rel_err_value(text: str) -> Optional[float]:
    """'12.5%' -> 0.125; 'N/A' -> None."""
    if not text.endswith("%"):
        return None
    try:
        return float(text[:-1]) / 100.0
    except ValueError:
        return None


def unsupported_tensor_fields() -> Dict[str, str]:
    return {k: "unsupported" for k in TENSOR_FIELDS}


def na_tensor_fields() -> Dict[str, str]:
    return {k: "N/A" for k in TENSOR_FIELDS}


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


def _r12(x: float) -> str:
    return to_str(round(float(x), 12)) if math.isfinite(x) else to_str(float(x))


def tensor_pair_metrics(debug_folder: Optional[str], debug_name: object, bench_folder: Optional[str],
                        bench_name: object) -> Tuple[Dict[str, str], Optional[str]]:
    """tensor_metrics of two items' files, each data_name looked up in its own rank's tensor folder
    (tensor_file: a name that leads out of it is not read, and the row says so)."""
    try:
        debug_path = tensor_file(debug_folder, debug_name, "NPU")
        bench_path = tensor_file(bench_folder, bench_name, "Bench")
    except TensorFileRefused as exc:
        return na_tensor_fields(), f"warning: cannot read tensor data: {exc}"
    return tensor_metrics(debug_path, bench_path)


def tensor_metrics(debug_path: str, bench_path: str) -> Tuple[Dict[str, str], Optional[str]]:
    """Real-data metrics of two dumped tensors, computed in float64. Returns (fields, message or None)."""
    import numpy as np

    try:
        n = load_array(debug_path)
        b = load_array(bench_path)
    except FileNotFoundError as exc:
        return na_tensor_fields(), f"warning: tensor file not found: {exc.filename}"
    except Exception as exc:  # unreadable file: report on the item, do not abort the whole compare
        return na_tensor_fields(), f"warning: cannot read tensor data: {exc}"
    if n.shape != b.shape:
        return na_tensor_fields(), "error: Shape of NPU and bench tensors do not match."
    zero_dim = n.ndim == 0
    n = n.ravel()
    b = b.ravel()
    if n.size == 0:
        return na_tensor_fields(), None   # (nothing differs: a pass, as in the reference)
    message = None
    # sums of squares first: finite sums mean no NaN/Inf anywhere (float32 data cannot overflow them), which
    # spares two full passes in the common case
    nn2, bb2 = float(np.dot(n, n)), float(np.dot(b, b))
    if not (math.isfinite(nn2) and math.isfinite(bb2)):
        n_bad = ~np.isfinite(n)
        b_bad = ~np.isfinite(b)
        same = np.array_equal(n_bad, b_bad) and np.array_equal(np.where(n_bad, n, 0), np.where(b_bad, b, 0),
                                                                equal_nan=True)
        if not same:
            if np.array_equal(n_bad, b_bad):   # (+inf against -inf, inf against NaN)
                return na_tensor_fields(), "error: NaN/Inf of different values at the same positions in NPU and bench tensors."
            return na_tensor_fields(), "error: NaN/Inf at different positions in NPU and bench tensors."
        n = np.where(n_bad, 0.0, n)
        b = np.where(b_bad, 0.0, b)
        nn2, bb2 = float(np.dot(n, n)), float(np.dot(b, b))
    diff = np.subtract(n, b)
    np.abs(diff, out=diff)
    denom = np.abs(b)
    denom[denom == 0] = EPS   # a zero bench element is divided by float32 epsilon
    rel = np.divide(diff, denom, out=denom)
    out: Dict[str, str] = {}
    if zero_dim:
        out["Cosine"] = "unsupported"
        out["EucDist"] = "unsupported"
    else:
        nn, bn = math.sqrt(nn2), math.sqrt(bb2)
        if nn == 0 and bn == 0:
            cos = 1.0
        elif nn == 0 or bn == 0:
            cos = float("nan")
            message = "warning: Cosine is NaN because one side's tensor is all zeros."
        else:
            cos = float(np.dot(n, b)) / (nn * bn)
        out["Cosine"] = _r12(cos)
        out["EucDist"] = to_str(math.sqrt(float(np.dot(diff, diff))))
    out["MaxAbsErr"] = _r12(float(diff.max()))
    out["MaxRelativeErr"] = _r12(float(rel.max()))
    if zero_dim:
        out["One Thousandth Err Ratio"] = "unsupported"
        out["Five Thousandths Err Ratio"] = "unsupported"
    else:
        out["One Thousandth Err Ratio"] = _r12(float(np.count_nonzero(rel < 0.001)) / rel.size)
        out["Five Thousandths Err Ratio"] = _r12(float(np.count_nonzero(rel < 0.005)) / rel.size)
    return out, message


def md5_of(item: dict) -> Optional[str]:
    if "md5" in item:
        return item["md5"]
    if "value" in item:
        return scalar_md5(item.get("value"))
    return None
