"""Names of the monitor's scalars: ``<module or parameter>/<metric>_<statistic>``.

One grammar shared by the writer, the CSV export and the dashboard routes, so none of them guesses. It imports
nothing heavy: the TensorBoard plugin parses tags without importing torch.

Examples: ``layers.0/output_norm``, ``layers.0.attn.qkv.weight/grad_norm``, ``layers.0:micro1/input_grad_max``,
``vp1:layers.0/input.1_mean`` (second tensor input of a model chunk), ``anomaly/AnomalyTurbulence/head/output_norm``.
"""
from typing import NamedTuple, Optional

__all__ = [
    "OPS",
    "METRICS",
    "ANOMALY_PREFIX",
    "CSV_TYPES",
    "TagParts",
    "make_tag",
    "parse_tag",
    "anomaly_tag",
    "parse_anomaly_tag",
]

# Statistics, in the order they are computed and stored. None has an underscore, so the last "_" splits a tag.
OPS = ("min", "max", "mean", "norm", "zeros", "nans")

# metric -> what it measures. The reference's names are the CSV data types (see CSV_TYPES).
METRICS = {
    "input": "module input (forward activation)",
    "output": "module output (forward activation)",
    "input_grad": "gradient of the module input",
    "output_grad": "gradient of the module output",
    "grad_unreduced": "weight gradient before the data-parallel reduction",
    "grad": "weight gradient the optimizer sees (after the data-parallel reduction)",
    "param": "weight before the optimizer step",
    "param_updated": "weight after the optimizer step",
    "exp_avg": "Adam first moment",
    "exp_avg_sq": "Adam second moment",
    "adam_update": "Adam update lr * m_hat / (sqrt(v_hat) + eps)",
    "update_ratio": "||adam update|| / ||weight||",
}

# metric -> (reference monitor CSV data type, suffix added to the name column). Activation rows of the reference
# are named "<module>.input" / "<module>.output" in both the actv and actv_grad files.
CSV_TYPES = {
    "input": ("actv", ".input"),
    "output": ("actv", ".output"),
    "input_grad": ("actv_grad", ".input"),
    "output_grad": ("actv_grad", ".output"),
    "grad_unreduced": ("grad_unreduced", ""),
    "grad": ("grad_reduced", ""),
    "param": ("param_origin", ""),
    "param_updated": ("param_updated", ""),
    "exp_avg": ("exp_avg", ""),
    "exp_avg_sq": ("exp_avg_sq", ""),
}

ANOMALY_PREFIX = "anomaly/"


class TagParts(NamedTuple):
    name: str  # module or parameter name, with ":micro<m>" / "vp<i>:" decorations if any
    metric: str  # e.g. "input", "input.1", "grad"
    op: str  # one of OPS

    @property
    def base_metric(self) -> str:
        """The metric without a tensor index ("input.1" -> "input")."""
        return self.metric.split(".", 1)[0]


def make_tag(name: str, metric: str, op: str) -> str:
    return f"{name}/{metric}_{op}"


def parse_tag(tag: str) -> Optional[TagParts]:
    """The parts of a monitor tag, or None for any other tag (including anomaly tags)."""
    if tag.startswith(ANOMALY_PREFIX):
        return None
    name, sep, last = tag.rpartition("/")
    if not sep or not name:
        return None
    metric, sep, op = last.rpartition("_")
    if not sep or op not in OPS:
        return None
    if metric.split(".", 1)[0] not in METRICS:
        return None
    return TagParts(name, metric, op)


def anomaly_tag(rule: str, tag: str) -> str:
    return f"{ANOMALY_PREFIX}{rule}/{tag}"


def parse_anomaly_tag(tag: str) -> Optional[tuple]:
    """(rule, monitored tag) of an anomaly tag, or None."""
    if not tag.startswith(ANOMALY_PREFIX):
        return None
    rule, sep, rest = tag[len(ANOMALY_PREFIX):].partition("/")
    if not sep or parse_tag(rest) is None:
        return None
    return rule, rest
