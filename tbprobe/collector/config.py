"""The collector's configuration: the reference's config.json keys, validated once, at construction.

Every problem (unknown key, bad value, wrong type) is a TbprobeError raised here, never later in training.
Framework-neutral.
"""
import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from tbprobe.errors import TbprobeError

__all__ = ["CollectorConfig", "load_config", "parse_config", "TASKS", "LEVELS"]

log = logging.getLogger("tbprobe.collector")

TASKS = ("statistics", "tensor", "structure")
# The reference's other tasks (older and newer releases' alike): a file may hold their blocks, whose keys are theirs
# (msprobe's own config.json ships an acc_check block), so they are not read; the tasks themselves are refused.
LATER_TASKS = ("overflow_check", "free_benchmark", "run_ut", "grad_probe", "acc_check", "exception_dump",
               "diff_check", "nan_check")
LEVELS = ("L0", "L1", "mix", "debug")
SUMMARY_MODES = ("statistics", "md5", "xor")
DATA_MODES = ("all", "forward", "backward", "input", "output")
RISK_LEVELS = ("FOCUS", "CORE", "ALL")
PRECISIONS = ("low", "high")

_TOP_KEYS = {"task", "dump_path", "rank", "step", "level", "async_dump", "extra_info", "precision", "risk_level",
             "framework", "is_deterministic", "enable_dataloader", "seed"} | set(TASKS) | set(LATER_TASKS)
_BLOCK_KEYS = {"scope", "list", "tensor_list", "data_mode", "summary_mode", "file_format", "risk_level",
               "backward_input", "online_run_ut", "nfs_path", "host", "port"}


@dataclass
class CollectorConfig:
    task: str = "statistics"
    dump_path: str = "./tbprobe_dump"
    level: str = "L1"
    ranks: Tuple[int, ...] = ()          # empty = every rank
    steps: Tuple[int, ...] = ()          # empty = every step
    async_dump: bool = False
    extra_info: bool = True
    precision: str = "high"
    scope: List[str] = field(default_factory=list)
    api_list: List[str] = field(default_factory=list)
    tensor_list: List[str] = field(default_factory=list)
    data_mode: List[str] = field(default_factory=lambda: ["all"])
    summary_mode: str = "statistics"
    risk_level: Optional[str] = None     # None = default (FOCUS); not used where scope or list is set

    @property
    def effective_risk_level(self) -> str:
        # as the reference: a scope or a list selects calls by name alone, whatever the risk level says
        # (CORE with a scope whose first call is not CORE recorded nothing at all)
        if self.scope or self.api_list:
            return "ALL"
        return self.risk_level or "FOCUS"


def _fail(where: str, problem: str) -> None:
    raise TbprobeError(f"config {where}: {problem}")


MAX_LISTED = 1_000_000   # how many steps or ranks a config may list, ranges expanded
# "4-6", or "3" alone, as the reference takes them (str.isdigit takes "²", int() refuses it)
_RANGE = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", re.ASCII)


# A scope's ends are record names the level writes (a typo would select nothing, without a word): the reference's
# rule. A module's: Module.<path>.<Class>.forward|backward.<n> (Cell for MindSpore); an operator's:
# <Prefix>.<api>.<n>.forward|backward.
_MODULE_NAME = re.compile(r"(Module|Cell)\..+\.(forward|backward)\.[0-9]+", re.ASCII)
_API_NAME = re.compile(r"(?!Module\.|Cell\.)[A-Za-z][A-Za-z0-9_]*\..+\.[0-9]+\.(forward|backward)", re.ASCII)


def _check_scope_name(where: str, name: str, level: str) -> None:
    module, api = _MODULE_NAME.fullmatch(name), _API_NAME.fullmatch(name)
    if level == "L0" and not module:
        _fail(where, f"{name!r} is not a module's record name (Module.<path>.<Class>.forward.<n>), which level L0 "
                     "writes")
    if level == "L1" and not api:
        _fail(where, f"{name!r} is not an operator's record name (e.g. Functional.linear.0.forward), which level L1 "
                     "writes")
    if level == "mix" and not (module or api):
        _fail(where, f"{name!r} is not a record name (Module.<path>.<Class>.forward.<n> or "
                     "Functional.linear.0.forward)")


def _check_dump_folder(path: str) -> None:
    """Refuse, when the debugger is made, a dump_path that an existing file (or a FIFO, a device) holds or that
    lies under one: start() said "not writable (File exists)" only later, and a config check said ok."""
    here = os.path.abspath(path)
    while not os.path.lexists(here):
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent
    if not os.path.isdir(here):
        if os.path.abspath(path) == here:
            _fail("dump_path", f"{path} is an existing file, not a folder")
        _fail("dump_path", f"{path}: {here} is a file, not a folder")


def _int_list(where: str, value: Any, allow_ranges: bool) -> Tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        _fail(where, f"must be a list, got {type(value).__name__}")
    out: List[int] = []
    for v in value:
        if isinstance(v, bool):
            _fail(where, f"invalid entry {v!r}")
        if isinstance(v, int):
            if v < 0:
                _fail(where, f"negative entry {v}")
            out.append(v)
        elif allow_ranges and isinstance(v, str) and (m := _RANGE.fullmatch(v)):
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if lo > hi:
                _fail(where, f"invalid range {v!r} (want 'a-b' with a <= b)")
            # (each listed number is held: a range as wide as a long run's whole length is a typo, not a filter)
            if len(out) + hi - lo + 1 > MAX_LISTED:
                _fail(where, f"range {v!r} lists {hi - lo + 1} numbers: at most {MAX_LISTED} in all")
            out.extend(range(lo, hi + 1))
        else:
            _fail(where, f"invalid entry {v!r}" + (" (want a number, '3' or 'a-b')" if allow_ranges else ""))
    return tuple(sorted(set(out)))


def _str_list(where: str, value: Any) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(where, "must be a list of strings")
    return list(value)


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        _fail(where, f"must be true or false, got {value!r}")
    return value


def _choice(where: str, value: Any, choices: Tuple[str, ...]) -> str:
    if value not in choices:
        _fail(where, f"invalid value {value!r} (one of {', '.join(choices)})")
    return value


def parse_config(raw: Dict[str, Any], task: Optional[str] = None, dump_path: Optional[str] = None,
                 level: Optional[str] = None, step: Optional[List[int]] = None) -> CollectorConfig:
    """Validate a config dict (as read from config.json); the explicit arguments override the file."""
    if not isinstance(raw, dict):
        _fail("file", "must hold a JSON object")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        _fail(f"key {unknown[0]!r}", f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    cfg = CollectorConfig()
    # (an argument given, or a key present, is checked as it is: "" or null is not the default)
    cfg.task = task if task is not None else raw.get("task", "statistics")
    if cfg.task in LATER_TASKS:
        _fail("task", f"{cfg.task!r} is not supported by the collector (use statistics, tensor or structure)")
    _choice("task", cfg.task, TASKS)
    cfg.dump_path = dump_path if dump_path is not None else raw.get("dump_path", cfg.dump_path)
    if not isinstance(cfg.dump_path, str) or not cfg.dump_path.strip():
        _fail("dump_path", "must be a non-empty string")
    _check_dump_folder(cfg.dump_path)
    cfg.level = _choice("level", level if level is not None else raw.get("level", "L1"), LEVELS)
    if cfg.task == "structure" and cfg.level not in ("L0", "mix"):
        # as the reference: the structure is the modules' and the operators' (an L1 structure is a flat list of
        # names, a debug one nothing); the default level is mix there, said only when a level was asked for
        if level is not None or "level" in raw:
            log.warning("tbprobe: task structure records at level L0 or mix; level %s becomes mix", cfg.level)
        cfg.level = "mix"
    cfg.ranks = _int_list("rank", raw.get("rank"), allow_ranges=True)
    cfg.steps = _int_list("step", step if step is not None else raw.get("step"), allow_ranges=True)
    cfg.async_dump = _bool("async_dump", raw.get("async_dump", False))
    cfg.extra_info = _bool("extra_info", raw.get("extra_info", True))
    cfg.precision = _choice("precision", raw.get("precision", "high"), PRECISIONS)
    if raw.get("framework", "pytorch") not in ("pytorch", "mindspore"):
        _fail("framework", f"invalid value {raw.get('framework')!r}")
    if "is_deterministic" in raw:
        _bool("is_deterministic", raw["is_deterministic"])
    if raw.get("enable_dataloader", False) is not False:
        _fail("enable_dataloader", "is not supported (wrap the training step with start/stop/step instead)")
    if raw.get("risk_level") is not None:
        cfg.risk_level = _choice("risk_level", raw["risk_level"], RISK_LEVELS)

    block = raw.get(cfg.task, {}) or {}
    for name in TASKS + LATER_TASKS:
        b = raw.get(name)
        if b is not None and not isinstance(b, dict):
            _fail(name, "must be a JSON object")
        if isinstance(b, dict) and name in TASKS:
            bad = sorted(set(b) - _BLOCK_KEYS)
            if bad:
                _fail(f"{name}.{bad[0]}", f"unknown key (known: {', '.join(sorted(_BLOCK_KEYS))})")
    where = cfg.task
    cfg.scope = _str_list(f"{where}.scope", block.get("scope"))
    if cfg.scope and len(cfg.scope) != 2:
        _fail(f"{where}.scope", "must hold two full names (first and last of the range) or be empty")
    for name in cfg.scope:
        _check_scope_name(f"{where}.scope", name, cfg.level)
    cfg.api_list = _str_list(f"{where}.list", block.get("list"))
    cfg.tensor_list = _str_list(f"{where}.tensor_list", block.get("tensor_list"))
    cfg.data_mode = _str_list(f"{where}.data_mode", block.get("data_mode", ["all"])) or ["all"]
    for m in cfg.data_mode:
        _choice(f"{where}.data_mode", m, DATA_MODES)
    if "all" in cfg.data_mode and len(cfg.data_mode) > 1:
        _fail(f"{where}.data_mode", f"'all' cannot be combined with other modes, got {cfg.data_mode}")
    cfg.summary_mode = _choice(f"{where}.summary_mode", block.get("summary_mode", "statistics"), SUMMARY_MODES)
    if cfg.task == "structure":
        cfg.summary_mode = "statistics"  # the reference accepts the key there and ignores it (task tensor uses it)
    if block.get("risk_level") is not None:
        cfg.risk_level = _choice(f"{where}.risk_level", block["risk_level"], RISK_LEVELS)
    if cfg.risk_level and cfg.risk_level != "ALL" and (cfg.scope or cfg.api_list):
        log.warning("tbprobe: risk_level %s is not used: %s.%s selects calls by name, as in msprobe",
                    cfg.risk_level, where, "scope" if cfg.scope else "list")
    if block.get("file_format", "pt") not in ("pt", "npy", "bin"):
        _fail(f"{where}.file_format", f"invalid value {block.get('file_format')!r}")
    return cfg


def load_config(config_path: Optional[str], **overrides: Any) -> CollectorConfig:
    """Read and validate config.json (or only the overrides when no path is given)."""
    raw: Dict[str, Any] = {}
    if config_path is not None:
        if os.path.isdir(config_path):
            raise TbprobeError(f"{config_path}: a folder, not a config file")
        if os.path.exists(config_path) and not os.path.isfile(config_path):   # (a FIFO would block the read)
            raise TbprobeError(f"{config_path}: not a regular file (a FIFO, a device or a socket)")
        if not os.path.isfile(config_path):
            raise TbprobeError(f"{config_path}: config file not found")
        try:
            with open(config_path, encoding="utf-8") as f:
                raw = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TbprobeError(f"{config_path}: not a readable JSON file ({exc})") from None
        except RecursionError:
            raise TbprobeError(f"{config_path}: not a config file (JSON nested too deep to read)") from None
    return parse_config(raw, **overrides)
