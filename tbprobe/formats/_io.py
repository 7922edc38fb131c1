"""Small file helpers shared by the format modules: read a JSON file with one clear error, write atomically."""
import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import IO, Any, Iterator, Optional, Tuple, Union

from tbprobe.errors import FormatError

__all__ = ["read_json", "is_truncation", "atomic_writer", "atomic_write_text", "describe_json_error", "describe_decode_error",
           "is_long_int_error", "long_int", "long_int_problem"]

PathLike = Union[str, "os.PathLike[str]"]


def is_truncation(msg: str, pos: int, text: str) -> bool:
    """Did decoding fail because the text ends too early (a file cut short) rather than on a syntax error?"""
    if pos >= len(text.rstrip()):
        return True
    # "Unterminated string starting at" points at the string's start; cut short if no quote closes it.
    return msg.startswith("Unterminated string") and text.find('"', pos + 1) == -1


def describe_json_error(exc: json.JSONDecodeError, at_eof: bool) -> str:
    """One line saying what is wrong: a file cut short reads differently from a syntax error."""
    msg = exc.msg.replace(" starting at", "")
    if at_eof:
        return f"truncated JSON: the file ends before the data is complete ({msg})"
    return f"invalid JSON at line {exc.lineno} column {exc.colno}: {msg}"


def describe_decode_error(exc: UnicodeDecodeError, offset: int = 0) -> str:
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {offset + exc.start})"


def is_long_int_error(exc: BaseException) -> bool:
    """The ValueError Python raises for an integer literal past sys.get_int_max_str_digits() (4300 digits by
    default): its text ("Exceeds the limit ... use sys.set_int_max_str_digits()") speaks of Python, not of the
    file, and it has no position."""
    return type(exc) is ValueError and "integer string conversion" in str(exc)


def long_int(text: str, start: int = 0) -> Optional[Tuple[int, int]]:
    """(position, digits) of the first integer literal in text[start:] with more digits than Python converts, or
    None (a fraction or exponent makes a float, which has no such limit)."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    if not limit:
        return None
    m = re.compile(r"(?<![\d.eE+-])-?(\d{%d,})(?![\d.eE])" % (limit + 1)).search(text, start)
    return (m.start(), len(m.group(1))) if m is not None else None


def long_int_problem(digits: Optional[int]) -> str:
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    many = f"{digits} digits; " if digits else ""
    return f"a number too long ({many}tbprobe reads integers of up to {limit} digits)"


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line} column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def read_json(path: PathLike, what: str = "JSON file") -> Any:
    """Parse a whole (small) JSON file once. NaN / Infinity tokens are accepted, as the reference writes them."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise FormatError(p, f"missing {what}") from None
    except IsADirectoryError:
        raise FormatError(p, f"expected a {what}, found a folder") from None
    except OSError as exc:
        raise FormatError(p, f"cannot read {what}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(p, describe_decode_error(exc)) from None
    if not text.strip():
        raise FormatError(p, f"empty {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(p, describe_json_error(exc, is_truncation(exc.msg, exc.pos, text))) from None
    except RecursionError:
        raise FormatError(p, "JSON nested too deeply") from None
    except ValueError as exc:   # (a traceback before)
        if not is_long_int_error(exc):
            raise
        found = long_int(text)
        where = f" at {_line_col(text, found[0])}" if found else ""
        raise FormatError(p, f"invalid JSON{where}: {long_int_problem(found[1] if found else None)}") from None


@contextlib.contextmanager
def atomic_writer(path: PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """Write `<path>.tmp-<pid>` and rename it over `path` only when the block completes: a crash or an exception
    never leaves a half-written file under the real name (the temporary file is removed)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    kwargs = {"encoding": "utf-8", "newline": "\n"} if "b" not in mode else {}
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_text(path: PathLike, text: str) -> None:
    with atomic_writer(path) as f:
        f.write(text)
