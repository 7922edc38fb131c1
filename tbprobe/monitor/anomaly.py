"""Anomaly detection on the host-side statistics of one step: non-finite values, thresholds and moving-average
turbulence (a spike above the exponential moving average of the value's magnitude).

Non-finite values are reported when they appear (``alert.non_finite``, "change" by default): at the step a
statistic turns from finite to NaN or ±Inf, or from one of those to another, not again at every step it stays so.
A series that may be non-finite by design (a module input that needs no gradient, such as a causal mask of -inf)
and is so from its first value is taken as it is: only a later change is reported. A NaN appearing in an output,
a gradient or a weight is reported at the step it appears, whatever came before.

Vectorised over every monitored series with numpy; it runs on the writer thread, never in the training loop.
"""
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence, Tuple

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
    # (slots: up to MAX_ANOMALIES of them are kept; the JSON entry, ten times the size, is made when written)
    __slots__ = ("step", "rank", "tag", "rule", "value", "history", "call_id")
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


_UNSEEN, _FINITE, _NAN, _POS_INF, _NEG_INF = -1, 0, 1, 2, 3


def _kinds(values: np.ndarray) -> np.ndarray:
    kind = np.full(values.shape, _FINITE, dtype=np.int8)
    kind[np.isnan(values)] = _NAN
    kind[values == np.inf] = _POS_INF
    kind[values == -np.inf] = _NEG_INF
    return kind


class AnomalyDetector:
    """Keeps, per (series, statistic), the moving average of |value| and how many values it has seen."""

    def __init__(self, rules: Sequence[AlertRule], ops: Sequence[str], rank: int = 0, non_finite: str = "change",
                 quiet: Iterable[str] = ()):
        self.rules = list(rules)
        self.ops = list(ops)
        self.rank = rank
        self.non_finite = non_finite   # "change", "every_step" or "off" (config.NON_FINITE_MODES)
        self._quiet = set(quiet)       # series that may be non-finite by design (mark_quiet)
        self._index: Dict[str, int] = {}
        width = len(self.ops)
        self._avg = np.zeros((0, width))
        self._prev = np.zeros((0, width))  # |value| of the previous step
        self._count = np.zeros((0, width), dtype=np.int64)
        # the kind of the last value (_kinds); _UNSEEN before the first
        self._kind = np.zeros((0, width), dtype=np.int8)
        self._tags: Dict[Tuple[int, int], str] = {}   # (row, op) -> tag, one string for all its anomalies

    def mark_quiet(self, keys: Iterable[str]) -> None:
        """Series (``<name>/<metric>``) that may be non-finite by design: a non-finite first value is no anomaly."""
        self._quiet.update(keys)

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
            self._kind = np.vstack([self._kind, np.full((grow, len(self.ops)), _UNSEEN, dtype=np.int8)])
        return np.array([self._index[k] for k in keys], dtype=np.int64)

    def _non_finite(self, keys: Sequence[str], rows: np.ndarray, kind: np.ndarray) -> np.ndarray:
        """Where the always-on check reports a non-finite value this step (alert.non_finite)."""
        bad = kind != _FINITE
        if self.non_finite == "off":
            return np.zeros_like(bad)
        before = self._kind[rows]
        if self.non_finite == "every_step":
            hit = bad
        else:
            # (a first value counts as a change from finite, but for a series non-finite by design)
            quiet = np.array([k in self._quiet for k in keys])[:, None] if self._quiet else False
            before = np.where(before == _UNSEEN, np.where(quiet, kind, _FINITE), before)
            hit = bad & (kind != before)
        self._kind[rows] = kind
        return hit

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
        # Non-finite values are reported without a rule (the first thing a user looks for), when they appear.
        flagged[self._non_finite(keys, rows, _kinds(values))] = "AnomalyNan"
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
            tag = self._tags.get((int(rows[i]), int(j)))
            if tag is None:
                tag = self._tags[(int(rows[i]), int(j))] = f"{keys[i]}_{self.ops[j]}"
            out.append(Anomaly(step, self.rank, tag, flagged[i, j], float(values[i, j]), hist, int(i)))
        return out
