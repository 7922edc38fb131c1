"""The monitor's configuration: the reference monitor's JSON keys, checked up front with one clear message each.

The reference warns about most bad values and carries on with a default; a monitor that silently records the wrong
thing wastes a training run, so here an unknown key or a wrong value is a :class:`TbprobeError` naming the file, the
key and what is allowed. Reference keys that tbprobe does not implement are accepted (a shared config file keeps
working) and logged once.
"""
import difflib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from tbprobe.errors import FormatError
from tbprobe.monitor.tags import OPS

__all__ = ["MonitorConfig", "AlertRule", "load_config", "parse_config", "RULE_NAMES"]

_log = logging.getLogger("tbprobe.monitor")

RULE_NAMES = ("AnomalyTurbulence", "AnomalyNan")
# alert.non_finite: when the always-on check reports a non-finite statistic (docs/monitor.md, Anomalies)
NON_FINITE_MODES = ("change", "every_step", "off")
# Statistics the reference also accepts but that are not scalars; accepted and ignored.
_IGNORED_OPS = ("shape", "dtype", "id")

_BOOL_KEYS = (
    "xy_distribution",
    "wg_distribution",
    "mv_distribution",
    "param_distribution",
    "ur_distribution",
    "forward_only",
    "backward_only",
    "all_xy",
    "dynamic_on",
    "monitor_mbs_grad",
    "print_struct",
)
# Reference keys without a tbprobe implementation: accepted, logged once when set to something non-default.
_UNSUPPORTED_KEYS = (
    "mg_direction",
    "mg_distribution",
    "cc_distribution",
    "stack_info",
    "squash_name",
    "recording_l2_features",
    "l2_targets",
    "sa_order",
    "append_output",
    "format",
    "step_count_per_record",
    "ndigits",
)
_OTHER_KEYS = (
    "targets",
    "ops",
    "eps",
    "start_step",
    "step_interval",
    "collect_times",
    "alert",
    "module_ranks",
    "output_dir",
)
KNOWN_KEYS = _BOOL_KEYS + _UNSUPPORTED_KEYS + _OTHER_KEYS


@dataclass
class AlertRule:
    name: str  # one of RULE_NAMES
    threshold: Optional[float]  # AnomalyTurbulence: relative rise over the moving average; AnomalyNan: |value| limit
    warmup: int = 5  # values seen before AnomalyTurbulence may fire (the moving average needs a history)
    ops: tuple = ("norm", "mean")  # statistics AnomalyTurbulence watches (the reference's pair by default)
    jump: bool = True  # AnomalyTurbulence also needs a rise over the previous value: steady growth is no spike


@dataclass
class MonitorConfig:
    path: str
    targets: Dict[str, Any] = field(default_factory=dict)  # module / parameter-prefix name -> (ignored) field spec
    xy_distribution: bool = False
    wg_distribution: bool = False
    mv_distribution: bool = False
    param_distribution: bool = False
    ur_distribution: bool = False
    forward_only: bool = False
    backward_only: bool = False
    all_xy: bool = False
    dynamic_on: bool = False
    monitor_mbs_grad: bool = False
    print_struct: bool = False
    ops: List[str] = field(default_factory=lambda: ["norm"])  # in OPS' order (how values are stored)
    ops_order: List[str] = field(default_factory=lambda: ["norm"])  # as the config lists them (CSV columns)
    eps: float = 1e-8
    start_step: int = 0
    step_interval: int = 1
    collect_times: int = 100_000_000
    alert_rules: List[AlertRule] = field(default_factory=list)
    alert_dump: bool = False
    non_finite: str = "change"
    module_ranks: List[int] = field(default_factory=list)
    output_dir: Optional[str] = None

    def output_root(self) -> str:
        """config ``output_dir`` > environment ``MONITOR_OUTPUT_DIR`` (the reference's) > ``./monitor_output``."""
        return self.output_dir or os.environ.get("MONITOR_OUTPUT_DIR") or "./monitor_output"


def load_config(path: str) -> MonitorConfig:
    """Read and check a monitor config file; :class:`FormatError` (a TbprobeError) on any problem."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise FormatError(path, "monitor config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(path, f"cannot read the monitor config ({exc})") from None
    except ValueError as exc:
        raise FormatError(path, f"not valid JSON ({exc})") from None
    return parse_config(raw, path)


_L2_HOOKS = ("linear_hook", "attention_hook", "moe_router_weight_hook", "moe_router_logit_hook")
_SA_ORDERS = ("s,b,h,d", "b,s,h,d")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# the reference's defaults of the keys tbprobe ignores that are not off or empty by default
_IGNORED_DEFAULTS = {"format": "csv", "step_count_per_record": 1, "ndigits": 6}


def _is_default(key: str, value: Any) -> bool:
    """Whether an ignored key's value asks for nothing (off, empty, or the reference's default): no warning."""
    if isinstance(value, bool):   # (True == 1: `true` is no step count, and it asks for something)
        return value is False
    if value is None or (isinstance(value, (dict, list, str)) and not value):
        return True
    default = _IGNORED_DEFAULTS.get(key)
    return default is not None and type(value) is type(default) and value == default


def _unsupported_value_problem(key: str, value: Any) -> Optional[str]:
    """Why the reference would refuse `value` for one of the keys tbprobe ignores (None: it takes it)."""
    if key in ("squash_name", "recording_l2_features", "mg_distribution", "mg_direction",
               "stack_info"):
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if key == "ndigits":
        if not value:
            return None
        return None if _is_int(value) and 0 < value <= 20 else f"must be an integer from 1 to 20, got {value!r}"
    if key == "sa_order":
        v = value.replace(" ", "") if isinstance(value, str) else value
        return None if v in _SA_ORDERS else f"must be one of {', '.join(_SA_ORDERS)}, got {value!r}"
    if key == "step_count_per_record":
        return None if _is_int(value) and 1 <= value <= 10**6 else f"must be an integer from 1 to 1000000, got {value!r}"
    if key == "append_output":
        return None if isinstance(value, list) and len(value) in (0, 2) else (
            f"must be a list of no or two items, got {value!r}")
    if key == "l2_targets":
        if not isinstance(value, dict):
            return f"must be an object mapping {', '.join(_L2_HOOKS)} to lists of module names, got {value!r}"
        for hook, names in value.items():
            if hook not in _L2_HOOKS:
                return f"key {hook!r} must be one of {', '.join(_L2_HOOKS)}"
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                return f"{hook!r} must map to a list of module names, got {names!r}"
        return None
    if key == "cc_distribution":
        if not isinstance(value, dict):
            return f"must be an object, got {value!r}"
        if "enable" in value and not isinstance(value["enable"], bool):
            return f"'enable' must be true or false, got {value['enable']!r}"
        unknown = sorted(set(value) - {"enable", "cc_codeline", "cc_pre_hook", "cc_log_only"})
        return f"has an unknown key {unknown[0]!r}" if unknown else None
    return None


def _fail(path: str, problem: str) -> None:
    raise FormatError(path, problem)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_key(raw: Dict[str, Any], key: str, default: int, minimum: int, path: str) -> int:
    value = raw.get(key, default)
    if not _is_int(value) and not (isinstance(value, float) and value.is_integer()):
        _fail(path, f"'{key}' must be an integer >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        _fail(path, f"'{key}' must be an integer >= {minimum}, got {value}")
    return value


def parse_config(raw: Any, path: str = "<config>") -> MonitorConfig:
    if not isinstance(raw, dict):
        _fail(path, "the monitor config must be a JSON object")
    for key in raw:
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(key, KNOWN_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            _fail(path, f"unknown key '{key}'{hint}")
    cfg = MonitorConfig(path=path)
    for key in _BOOL_KEYS:
        if key in raw:
            if not isinstance(raw[key], bool):
                _fail(path, f"'{key}' must be true or false, got {raw[key]!r}")
            setattr(cfg, key, raw[key])
    for key in _UNSUPPORTED_KEYS:
        if key in raw and raw[key] is not None:
            problem = _unsupported_value_problem(key, raw[key])
            if problem:   # (a value the reference refuses is refused here too, though tbprobe ignores the key)
                _fail(path, f"'{key}' {problem}")
        if key in raw and not _is_default(key, raw[key]):
            _log.warning("monitor config key '%s' is not implemented by tbprobe and is ignored", key)

    targets = raw.get("targets", {})
    if isinstance(targets, list) and all(isinstance(t, str) for t in targets):
        targets = {t: {} for t in targets}
    if not isinstance(targets, dict):
        _fail(path, "'targets' must be an object mapping module names to {} (or a list of module names)")
    for name, spec in targets.items():
        if not isinstance(spec, dict):
            _fail(path, f"'targets' entry '{name}' must map to an object such as {{}}, got {spec!r}")
    cfg.targets = dict(targets)

    ops = raw.get("ops", ["norm"])
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
        _fail(path, f"'ops' must be a list of statistics from {list(OPS)}")
    kept = []
    for op in ops:
        if op in _IGNORED_OPS:
            continue
        if op not in OPS:
            _fail(path, f"'ops' has unknown statistic '{op}'; choose from {list(OPS)}")
        if op not in kept:
            kept.append(op)
    # Stored in the canonical order so every step's statistics line up in one table.
    cfg.ops = [op for op in OPS if op in kept] or ["norm"]
    cfg.ops_order = kept or ["norm"]   # (the reference's CSV columns follow the config)

    eps = raw.get("eps", 1e-8)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        _fail(path, f"'eps' must be a positive number, got {eps!r}")
    cfg.eps = float(eps)
    cfg.start_step = _int_key(raw, "start_step", 0, 0, path)
    cfg.step_interval = _int_key(raw, "step_interval", 1, 1, path)
    # (0 would record nothing, without a word: the reference takes it, and records nothing)
    cfg.collect_times = _int_key(raw, "collect_times", 100_000_000, 1, path)

    ranks = raw.get("module_ranks", [])
    if not isinstance(ranks, list) or not all(_is_int(r) and r >= 0 for r in ranks):
        _fail(path, f"'module_ranks' must be a list of rank numbers, got {ranks!r}")
    cfg.module_ranks = list(ranks)

    out = raw.get("output_dir")
    if out is not None and (not isinstance(out, str) or not out):
        _fail(path, f"'output_dir' must be a folder path, got {out!r}")
    cfg.output_dir = out

    cfg.alert_rules, cfg.alert_dump, cfg.non_finite = _parse_alert(raw.get("alert", {}), path)
    if cfg.forward_only and cfg.backward_only:
        _fail(path, "'forward_only' and 'backward_only' cannot both be true")
    return cfg


def _parse_alert(alert: Any, path: str):
    if not isinstance(alert, dict):
        _fail(path, "'alert' must be an object like {\"rules\": [...], \"dump\": false}")
    for key in alert:
        if key not in ("rules", "dump", "non_finite"):
            _fail(path, f"'alert' has unknown key '{key}' (allowed: rules, dump, non_finite)")
    dump = alert.get("dump", False)
    if not isinstance(dump, bool):
        _fail(path, f"'alert.dump' must be true or false, got {dump!r}")
    non_finite = alert.get("non_finite", "change")
    if non_finite not in NON_FINITE_MODES:
        _fail(path, f"'alert.non_finite' must be one of {', '.join(NON_FINITE_MODES)}, got {non_finite!r}")
    rules_raw = alert.get("rules", [])
    if not isinstance(rules_raw, list):
        _fail(path, "'alert.rules' must be a list of {\"rule_name\": ..., \"args\": {...}}")
    rules = []
    for i, spec in enumerate(rules_raw):
        where = f"'alert.rules[{i}]'"
        if not isinstance(spec, dict) or spec.get("rule_name") not in RULE_NAMES:
            _fail(path, f"{where} needs a rule_name from {list(RULE_NAMES)}, got {spec!r}")
        args = spec.get("args") or {}
        if not isinstance(args, dict):
            _fail(path, f"{where}.args must be an object")
        for key in args:
            if key not in ("threshold", "warmup", "ops", "jump"):
                _fail(path, f"{where}.args has unknown key '{key}' (allowed: threshold, warmup, ops, jump)")
        threshold = args.get("threshold")
        name = spec["rule_name"]
        if name == "AnomalyTurbulence" and threshold is None:
            _fail(path, f"{where}: AnomalyTurbulence needs args.threshold (e.g. 0.5)")
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0
        ):
            _fail(path, f"{where}.args.threshold must be a number >= 0, got {threshold!r}")
        warmup = args.get("warmup", 5)
        if not _is_int(warmup) or warmup < 0:
            _fail(path, f"{where}.args.warmup must be an integer >= 0, got {warmup!r}")
        rule_ops = args.get("ops", ["norm", "mean"])
        if not isinstance(rule_ops, list) or not rule_ops or any(o not in OPS for o in rule_ops):
            _fail(path, f"{where}.args.ops must be a non-empty list of statistics from {list(OPS)}")
        jump = args.get("jump", True)
        if not isinstance(jump, bool):
            _fail(path, f"{where}.args.jump must be true or false, got {jump!r}")
        rules.append(AlertRule(name, None if threshold is None else float(threshold), warmup, tuple(rule_ops), jump))
    return rules, dump, non_finite
