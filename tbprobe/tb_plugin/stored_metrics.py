"""The compare figures stored in a node's rows (input_data/output_data: text such as "14.2%", "nan", "-inf") read
back as numbers, and a node's worst output figure of each metric: what /api/filter shows, sorts and colours by.
"""
import math
import re
from typing import Dict, Optional, Tuple, Union

__all__ = ["METRIC_FIELDS", "LOWER_IS_WORSE", "NAN_TEXTS", "INF_TEXTS", "MetricValue", "metric_number", "metric_json",
           "metric_sort_key", "row_metrics"]

# The compare fields a node can be coloured or sorted by (statistics, tensor and md5 modes of the reference).
METRIC_FIELDS = ("Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                 "MeanRelativeErr", "NormRelativeErr", "Cosine", "EucDist", "MaxAbsErr",
                 "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
# Metrics where a lower value is the worse one (a cosine similarity, the share of elements within 1/1000 or
# 5/1000); for the others the value farthest from 0 is.
LOWER_IS_WORSE = ("Cosine", "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
# the texts of a NaN and an infinity (metric_table's SQL reads the same ones)
NAN_TEXTS = ("nan", "+nan", "-nan")
INF_TEXTS = ("inf", "+inf", "-inf", "infinity", "+infinity", "-infinity")
_NUMERIC_TEXT = re.compile(r"^[-+.0-9eE]*[0-9][-+.0-9eE]*$")

MetricValue = Union[float, str]


def metric_number(value) -> Optional[float]:
    """A stored metric as a float, signed as stored ("14.2%" -> 14.2, "nan" -> nan, "-inf" -> -inf); None for
    text that is no number ("N/A", a shape). The same texts as metric_table's SQL reads."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().rstrip("%").strip()
    low = text.lower()
    if low in NAN_TEXTS:
        return float("nan")
    if low in INF_TEXTS:
        return float("-inf") if low.startswith("-") else float("inf")
    if not _NUMERIC_TEXT.match(text):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _severity(key: str, value: float) -> tuple:
    """How bad a metric value is, comparable across the values of one metric: NaN worst, then an infinity, then the
    value farthest from 0 (the lowest, for LOWER_IS_WORSE metrics)."""
    if value != value:
        return (2, 0.0)
    if math.isinf(value):
        return (1, 0.0)
    return (0, -value if key in LOWER_IS_WORSE else abs(value))


def metric_json(value: float) -> MetricValue:
    """A metric value for a JSON answer: a number, or "nan", "inf", "-inf" (JSON has no literal for them)."""
    if value != value:
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def metric_sort_key(value) -> Optional[tuple]:
    """The key /api/filter sorts a metric by: its magnitude, NaN above an infinity above every finite value."""
    number = metric_number(value)
    return None if number is None else _severity("", number)   # ("": no metric where lower is worse)


def _result_items(name: str, input_data, output_data) -> list:
    """The items that hold a node's own result: its outputs; for a parameters_grad node, which has none, its
    gradients (stored with the inputs)."""
    source = output_data if isinstance(output_data, dict) and output_data else None
    if source is None and ".parameters_grad." in name and isinstance(input_data, dict):
        source = input_data
    return [v for v in (source or {}).values() if isinstance(v, dict)]


def row_metrics(name: str, input_data, output_data, fields=METRIC_FIELDS) -> Dict[str, MetricValue]:
    """The node's worst output figure of each metric (decoded input_data/output_data columns), signed as stored,
    NaN and infinities as "nan", "inf", "-inf": the value of the output farthest from 0, NaN before an infinity
    before any finite value (for LOWER_IS_WORSE metrics the lowest). A parameters_grad node, without outputs, by
    its gradients. Inputs never count: an input's difference was carried in (a node whose output is NaN showed
    its input's Max diff, unsigned)."""
    worst: Dict[str, Tuple[tuple, float]] = {}
    for item in _result_items(name, input_data, output_data):
        for key in fields:
            value = metric_number(item.get(key))
            if value is None:
                continue
            sev = _severity(key, value)
            if key not in worst or sev > worst[key][0]:
                worst[key] = (sev, value)
    return {key: metric_json(worst[key][1]) for key in fields if key in worst}
