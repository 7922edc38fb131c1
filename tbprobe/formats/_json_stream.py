"""Reading a large JSON file block by block: the unconsumed tail of the text, positions for error messages,
and decoding one value at a time with the C scanner of the json module (reading more when a value runs past
the buffer). Used by dump_json; errors are FormatError with the line and column."""
import codecs
import json
import re
from pathlib import Path
from typing import IO, Any, Callable, Optional, Tuple

from tbprobe.errors import FormatError
from tbprobe.formats._io import describe_decode_error, is_long_int_error, is_truncation, long_int, long_int_problem

__all__ = ["Stream", "scan_value", "scan_key", "json_type", "BLOCK", "WS"]

BLOCK = 1 << 20  # 1 MiB of text per read: small next to a 100 MB dump, large enough that re-scans are rare
WS = re.compile(r"[ \t\n\r]*")
_scan_once = json.JSONDecoder().scan_once
_scanstring = json.decoder.scanstring


def scan_value(s: str, idx: int) -> Tuple[Any, int]:
    return _scan_once(s, idx)


def scan_key(s: str, idx: int) -> Tuple[str, int]:
    """A JSON string whose opening quote is at idx."""
    return _scanstring(s, idx + 1, True)


def json_type(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(v), type(v).__name__)


class Stream:
    """Text of a file read block by block; `pos` indexes `buf`. Keeps only the unconsumed tail in memory."""

    def __init__(self, path: Path, f: IO[bytes], block: int = BLOCK):
        self.path = path
        self.f = f
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.dropped_chars = 0  # characters consumed and dropped before buf[0]
        self.bytes_read = 0
        self.block = block

    def more(self, grow: bool = False) -> None:
        """Read the next block. grow: at least as much again as the pending text, so that re-decoding a value
        longer than a block after each read costs at most twice its length in all."""
        if self.eof:
            raise RuntimeError("read past the end of the file")  # callers check eof first
        size = max(self.block, len(self.buf) - self.pos) if grow else self.block
        block = self.f.read(size)
        try:
            text = self.decoder.decode(block, final=not block)
        except UnicodeDecodeError as exc:
            raise FormatError(self.path, describe_decode_error(exc, self.bytes_read)) from None
        self.bytes_read += len(block)
        if not block:
            self.eof = True
        # Lines are not counted here (that would cost a pass over the text); `where` counts them on error.
        self.dropped_chars += self.pos
        self.buf = self.buf[self.pos:] + text
        self.pos = 0

    def absolute(self, pos: int) -> int:
        """A buffer position as a position in the whole text (stable across `more`)."""
        return self.dropped_chars + pos

    def where(self, pos: int) -> str:
        """"line L column C" of a buffer position; the dropped text is read again from the file (error path only)."""
        before = self._text_before(self.dropped_chars) + self.buf[:pos]
        line = before.count("\n") + 1
        return f"line {line} column {len(before) - (before.rfind(chr(10)) + 1) + 1}"

    def _text_before(self, n_chars: int) -> str:
        if n_chars == 0:
            return ""
        with open(self.path, "rb") as f:
            text = f.read(n_chars * 4 + 4).decode("utf-8", errors="replace")
        return text[:n_chars]

    def skip_ws(self) -> str:
        """Skip whitespace and return the next character ('' at end of file)."""
        while True:
            self.pos = WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return ""
            self.more()

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if c == "" or c not in chars:
            self.fail(f"expected {what}" + (f", found {c!r}" if c else ""))
        self.pos += 1
        return c

    def decode(self, parse: Callable[[str, int], Tuple[Any, int]]) -> Any:
        """Decode one value at pos with `parse`, reading more blocks while the value runs past the buffer."""
        while True:
            try:
                value, end = parse(self.buf, self.pos)
            except (StopIteration, json.JSONDecodeError, ValueError) as exc:
                if not self.eof:
                    self.more(grow=True)
                    continue
                where = getattr(exc, "pos", None)
                if isinstance(exc, StopIteration):
                    where = exc.value
                problem = decode_problem(exc)
                if is_long_int_error(exc):   # (Python's words, at the start of the value)
                    found = long_int(self.buf, self.pos)
                    where = found[0] if found else None
                    problem = long_int_problem(found[1] if found else None)
                if where is not None and is_truncation(problem, where, self.buf):
                    where = len(self.buf)
                self.fail(problem, where)
            # A value that ends exactly at the buffer end may be cut short (a number): only trust it at EOF.
            if end >= len(self.buf) and not self.eof:
                self.more(grow=True)
                continue
            self.pos = end
            return value

    def fail(self, problem: str, pos: Optional[int] = None) -> None:
        pos = self.pos if pos is None else pos
        if self.eof and pos >= len(self.buf.rstrip()):
            raise FormatError(self.path, f"truncated JSON: the file ends before the data is complete ({problem})")
        raise FormatError(self.path, f"invalid JSON at {self.where(pos)}: {problem}")


def decode_problem(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg.replace(" starting at", "")
    if isinstance(exc, StopIteration):
        return "expected a value"
    return str(exc)
