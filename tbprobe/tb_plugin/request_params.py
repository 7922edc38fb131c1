"""Parsing and validating request parameters: every bad value is a 400 with the parameter's name."""
import json
import re
from typing import Iterable, List, Mapping, Optional

from tbprobe.tb_plugin.api_error import ApiError, quoted

__all__ = ["text", "integer", "flag", "side", "choices", "MAX_LIMIT", "INT32"]

MAX_LIMIT = 50000
# the range of an integer parameter (a step, a rank, a micro step): what SQLite binds and the index stores
INT32 = (-(1 << 31), (1 << 31) - 1)
_INTEGER = re.compile(r"-?[0-9]+")
_SIDES = ("NPU", "Bench")


def text(args: Mapping, name: str, default: Optional[str] = None, max_len: int = 4096) -> str:
    value = args.get(name, default)
    if value is None or (value == "" and default is None):
        raise ApiError(400, f"missing parameter: {name}")
    if not isinstance(value, str):
        raise ApiError(400, f"parameter {name} must be text")
    if len(value) > max_len:
        raise ApiError(400, f"parameter {name} is longer than {max_len} characters")
    return value


def integer(args: Mapping, name: str, default: Optional[int] = None, lo: int = INT32[0], hi: int = INT32[1],
            body: bool = False) -> int:
    """A query parameter's digits, or (``body``: a JSON body's value) a JSON integer: ``"step": "0"`` is text."""
    value = args.get(name)
    if value is None or (value == "" and not body):
        if default is None:
            raise ApiError(400, f"missing parameter: {name}")
        return default
    if body and (isinstance(value, bool) or not isinstance(value, int)):
        raise ApiError(400, f"parameter {name} must be a JSON integer, got {json.dumps(value)[:40]}")
    # ASCII digits with an optional minus (the range below says where a negative one means nothing): int() took
    # " 0", "0_0" and other scripts' digits ("\u0660", Arabic-Indic zero) as 0; a JSON 1.5 is refused like "1.5"
    if not isinstance(value, int) and not (isinstance(value, str) and _INTEGER.fullmatch(value)):
        raise ApiError(400, f"parameter {name} must be an integer, got {quoted(value, 40)}")
    number = int(value) if isinstance(value, int) or len(value) <= 20 else hi + 1   # (int() refuses 4300 digits)
    if isinstance(value, bool) or not lo <= number <= hi:
        raise ApiError(400, f"parameter {name} must be between {lo} and {hi}")
    return number


def flag(args: Mapping, name: str, body: bool = False) -> bool:
    """A query parameter's 0 or 1 (absent or empty: 0), or (``body``) a JSON boolean: ``"no"`` and ``"yes"`` were
    both true in a body, and a query took ``yes`` for ``compact`` where it refused ``regex=2``."""
    value = args.get(name)
    if body:
        if value is None or isinstance(value, bool):
            return bool(value)
        raise ApiError(400, f"parameter {name} must be a JSON boolean (true or false), got {json.dumps(value)[:40]}")
    if value in (None, "", "0"):
        return False
    if value == "1":
        return True
    raise ApiError(400, f"parameter {name} must be 0 or 1, got {quoted(value, 40)}")


def side(args: Mapping, default: Optional[str] = None) -> str:
    value = args.get("side", default)
    if value not in _SIDES:
        raise ApiError(400, "parameter side must be NPU or Bench")
    return value


def choices(args: Mapping, name: str, allowed: Iterable[str]) -> List[str]:
    """A comma-separated subset of ``allowed`` (empty = no filter)."""
    allowed = list(allowed)
    raw = args.get(name) or ""
    values = [v.strip() for v in str(raw).split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ApiError(400, f"parameter {name}: unknown value {quoted(bad[0])} (allowed: {', '.join(allowed)})")
    return values
