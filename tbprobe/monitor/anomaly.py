"""Anomaly detection on the host-side statistics of one step: non-finite values, thresholds and moving-average
turbulence (a spike above the exponential moving average of the value's magnitude).

Vectorised over every monitored series with numpy; it runs on the writer thread, never in the training loop.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np

from tbprobe.monitor.config import AlertRule
from tbprobe.monitor.tags import parse_tag

__all__ = ["Anomaly", "AnomalyDetector", "BETA", "json_number"]

BETA = 0.99  # weight of the history in the moving average (the reference monitor's value)


def json_number(v: float):
    """A float JSON can hold: NaN and infinities become the strings "nan", "inf", "-inf"."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


@dataclass
class Anomaly:
    step: int
    rank: int
    tag: str  # the monitored scalar, "<name>/<metric>_<op>"
    rule: str
    value: float
    history: float  # moving average of |value| before this step (NaN when none)
    call_id: int  # order of the statistic within the step (the reference's call_id)

    def message(self) -> str:
        if self.rule == "AnomalyNan" and not math.isfinite(self.value):
            why = f"non-finite value {self.value}"
        elif self.rule == "AnomalyNan":
            why = f"|value| {self.value:.6g} over the threshold"
        else:
            why = f"value {self.value:.6g} vs moving average {self.history:.6g}"
        return f"{self.rule}: {self.tag} at step {self.step} on rank {self.rank}: {why}"

    def to_json(self) -> dict:
        parts = parse_tag(self.tag)
        name = parts.name if parts else self.tag
        micro = 0
        if ":micro" in name:
            try:
                micro = int(name.rsplit(":micro", 1)[1])
            except ValueError:
                micro = 0
        vpp = 0
        if name.startswith("vp") and ":" in name:
            try:
                vpp = int(name[2:name.index(":")])
            except ValueError:
                vpp = 0
        return {
            "step": self.step,
            "rank": self.rank,
            "tag": self.tag,
            "name": name,
            "metric": parts.metric if parts else None,
            "op": parts.op if parts else None,
            "rule": self.rule,
            "value": json_number(self.value),
            "history": json_number(self.history),
            "message": self.message(),
            # The reference's GradAnomalyData fields, so its analysis scripts find what they expect.
            "micro_step": micro,
            "pp_stage": 0,
            "vpp_stage": vpp,
            "call_id": self.call_id,
            "tag_name": self.tag,
            "group_mates": [self.rank],
        }


class AnomalyDetector:
    """Keeps, per (series, statistic), the moving average of |value| and how many values it has seen."""

    def __init__(self, rules: Sequence[AlertRule], ops: Sequence[str], rank: int = 0):
        self.rules = list(rules)
        self.ops = list(ops)
        self.rank = rank
        self._index: Dict[str, int] = {}
        width = len(self.ops)
        self._avg = np.zeros((0, width))
        self._prev = np.zeros((0, width))  # |value| of the previous step
        self._count = np.zeros((0, width), dtype=np.int64)

    def _rows(self, keys: Sequence[str]) -> np.ndarray:
        new = [k for k in keys if k not in self._index]
        if new:
            start = len(self._index)
            for i, k in enumerate(dict.fromkeys(new)):
                self._index[k] = start + i
            grow = len(self._index) - self._avg.shape[0]
            self._avg = np.vstack([self._avg, np.zeros((grow, len(self.ops)))])
            self._prev = np.vstack([self._prev, np.zeros((grow, len(self.ops)))])
            self._count = np.vstack([self._count, np.zeros((grow, len(self.ops)), dtype=np.int64)])
        return np.array([self._index[k] for k in keys], dtype=np.int64)

    def scan(self, step: int, keys: Sequence[str], values: np.ndarray) -> List[Anomaly]:
        """Anomalies of this step (keys are "<name>/<metric>", values ``[len(keys), len(ops)]``)."""
        if not len(keys):
            return []
        rows = self._rows(keys)
        avg = self._avg[rows]
        prev = self._prev[rows]
        count = self._count[rows]
        absval = np.abs(values)
        finite = np.isfinite(values)
        flagged = np.zeros(values.shape, dtype=object)
        flagged[:] = None
        # Non-finite values are always reported: they are the first thing a user looks for.
        flagged[~finite] = "AnomalyNan"
        for rule in self.rules:
            if rule.name == "AnomalyNan" and rule.threshold is not None:
                hit = finite & (absval > rule.threshold)
            elif rule.name == "AnomalyTurbulence":
                hit = finite & (count >= max(rule.warmup, 1)) & (absval > avg * (1.0 + rule.threshold))
                if rule.jump:  # a spike rises over the last value too; a series that grows steadily does not
                    hit &= absval > prev * (1.0 + rule.threshold)
                hit &= np.array([op in rule.ops for op in self.ops])[None, :]
            else:
                continue
            flagged[hit & np.equal(flagged, None)] = rule.name
        # Update the history with finite values only, so one NaN does not poison the average for good.
        first = finite & (count == 0)
        later = finite & (count > 0)
        new_avg = avg.copy()
        new_avg[first] = absval[first]
        new_avg[later] = BETA * avg[later] + (1 - BETA) * absval[later]
        self._avg[rows] = new_avg
        self._prev[rows] = np.where(finite, absval, prev)
        self._count[rows] = count + finite
        out = []
        for i, j in zip(*np.nonzero(np.not_equal(flagged, None))):
            hist = float(avg[i, j]) if count[i, j] else float("nan")
            tag = f"{keys[i]}_{self.ops[j]}"
            out.append(Anomaly(step, self.rank, tag, flagged[i, j], float(values[i, j]), hist, int(i)))
        return out
