"""Per-item metrics: statistics differences, checksum equality and real-data (tensor) metrics.

Each function returns the compare fields of one item pair as strings, in the reference's formats:
statistics diffs as Python floats ("0.05"), relative errors as "12.345678%" ("0.0%" when equal, "N/A" when the
bench value is 0), tensor metrics rounded to 12 decimals (EucDist unrounded), "unsupported" where a metric does
not apply (0-dim tensors, non-tensor arguments)."""
import math
from typing import Dict, Optional, Tuple

from tbprobe.graph_builder.items import scalar_md5, to_str
from tbprobe.graph_builder.tensor_files import TensorFileRefused, load_array, tensor_file

__all__ = ["STAT_FIELDS", "TENSOR_FIELDS", "stat_fields", "tensor_metrics", "unsupported_tensor_fields",
           "na_tensor_fields", "rel_err_value", "EPS", "tensor_pair_metrics", "norm_warns"]

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


def norm_warns(worst_in: float, worst_out: float) -> bool:
    """The reference's warning "the norm relative error of output is 10 times that of input": over inputs that
    match exactly (no NormRelativeErr, or 0) an output error past 10 %, else an output error 10 times the worst
    input's, however small. (tbprobe once asked for the 10 % in both cases, guessed from the fixtures, and passed
    amplifications such as 0.02 % in, 0.27 % out that msprobe warns on: 161 warnings against 5 on a deep GPT.)"""
    return worst_out > 0.1 if worst_in == 0 else worst_out > 10 * worst_in
