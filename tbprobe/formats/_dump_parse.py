"""The dump.json parser behind load_dump: the top-level object is walked by hand so that "data" can be read
entry by entry, without ever holding the whole text next to the parsed result.

Two ways to take the "data" object:
- eager: every entry decoded to a dict. Fast path: cut the buffer at the last `,\n  "` (an entry boundary in
  the reference's layout, json.dump(indent=1), and in tbprobe's) and decode everything before it in one C call.
- lazy: every entry kept as its JSON text, to be decoded when it is used (LazyEntries). Fast path: split the
  buffer at the same boundaries, check that each piece is `"name": {...}`. The last entry of each block, and
  every entry of a file in another layout, go through the full decoder, so a truncated file is always found here.
"""
import json
from typing import Any, Callable, Dict, Optional, Tuple

from tbprobe.errors import FormatError
from tbprobe.formats._dump_split import split_members
from tbprobe.formats._json_stream import WS, Stream, json_type, scan_key, scan_value

__all__ = ["parse_dump", "entry_value_start", "SEP"]

SEP = ',\n  "'  # between two entries of "data" in the reference's layout
_scan_once = json.JSONDecoder().scan_once
_scanstring = json.decoder.scanstring


def parse_dump(s: Stream, lazy: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(top-level values, entries): entries are dicts, or with lazy their JSON text (checked to be an object)."""
    s.more()
    if s.skip_ws() == "":
        raise FormatError(s.path, "empty file")
    if s.buf[s.pos] != "{":
        s.fail(f"a dump.json must be a JSON object, found {s.buf[s.pos]!r}")
    s.pos += 1
    top: Dict[str, Any] = {}
    entries: Dict[str, Any] = {}
    first = True
    while True:
        c = s.skip_ws()
        if c == "}" and first:
            s.pos += 1
            break
        if not first:
            s.expect(",}", "',' or '}' after a top-level value")
            if s.buf[s.pos - 1] == "}":
                break
            c = s.skip_ws()
        first = False
        if c != '"':
            s.fail("expected a key")
        key = s.decode(scan_key)
        s.expect(":", "':'")
        if key == "data" and s.skip_ws() == "{":
            s.pos += 1
            (_data_lazy if lazy else _data_eager)(s, entries)
            top["data"] = entries
        else:
            s.skip_ws()
            top[key] = s.decode(scan_value)
            if key == "data":
                raise FormatError(s.path, f'"data" must be an object of entries, found {json_type(top[key])}')
    if s.skip_ws() != "":
        s.fail("extra data after the top-level object")
    return top, entries


def _walk_members(s: Stream, fast_chunk: Optional[Callable[[int, int], bool]],
                  take_one: Callable[[str, dict, int], None]) -> None:
    """Walk the members of the "data" object, whose values must be objects. While `fast_chunk(start, cut)` takes
    the whole entries up to the last `,\n  "` in the buffer (and returns True), no entry is decoded one by one; once
    it declines, the rest goes one entry at a time through `take_one(name, entry, start)`."""
    first = True
    while True:
        c = s.skip_ws()
        if c == "}" and first:
            s.pos += 1
            return
        if not first:
            s.expect(",}", "',' or '}' between entries")
            if s.buf[s.pos - 1] == "}":
                return
            c = s.skip_ws()
        first = False
        if c != '"':
            s.fail("expected an entry name")
        if fast_chunk is not None:
            cut = s.buf.rfind(SEP, s.pos)
            if cut > s.pos:
                if fast_chunk(s.pos, cut):
                    s.pos = cut
                    continue
                fast_chunk = None
        name = s.decode(scan_key)
        s.expect(":", "':'")
        s.skip_ws()
        start = s.absolute(s.pos)  # decode may read more and shift the buffer
        entry = s.decode(scan_value)
        start -= s.dropped_chars
        if type(entry) is not dict:
            s.fail(f'entry "{name}" must be an object, found {json_type(entry)}', start)
        take_one(name, entry, start)


def _data_eager(s: Stream, entries: Dict[str, dict]) -> None:
    """Decode the "data" object. Fast path: cut the buffer at the last `,\n  "` (an entry boundary in the
    reference's layout and in ours) and decode everything before it in one C call, which also shares the key
    strings across those entries. If that text is not exactly a list of members (another layout), fall back to
    decoding one entry at a time for the rest of the file."""

    def fast_chunk(start: int, cut: int) -> bool:
        chunk = _try_members(s.buf, start, cut)
        if chunk is None:
            return False
        entries.update(chunk)
        return True

    def take_one(name: str, entry: dict, start: int) -> None:
        entries[name] = entry

    _walk_members(s, fast_chunk, take_one)


def _try_members(buf: str, start: int, cut: int) -> Optional[Dict[str, dict]]:
    """buf[start:cut] decoded as the members of one object whose values are all objects, or None."""
    text = "{" + buf[start:cut] + "}"
    try:
        chunk, end = _scan_once(text, 0)
    except (StopIteration, ValueError):
        return None
    if end != len(text) or type(chunk) is not dict:
        return None
    for v in chunk.values():
        if type(v) is not dict:
            return None  # let the one-by-one path report the bad entry with its line
    return chunk


def _reference_layout(s: Stream) -> bool:
    """Is the text after `"data": {` laid out like json.dump(indent=1) (entries at exactly two spaces)?"""
    while len(s.buf) - s.pos < 5 and not s.eof:
        s.more()
    return s.buf.startswith('\n  "', s.pos)


def _data_lazy(s: Stream, raw: Dict[str, str]) -> None:
    def fast_chunk(start: int, cut: int) -> bool:
        _split_members(s, start, cut, raw)
        return True

    def take_one(name: str, entry: dict, start: int) -> None:
        # The same form _split_members stores; the name is re-encoded because reading more may have dropped it.
        raw[name] = json.dumps(name)[1:] + ": " + s.buf[start:s.pos]

    _walk_members(s, fast_chunk if _reference_layout(s) else None, take_one)


def _split_members(s: Stream, start: int, cut: int, raw: Dict[str, str]) -> None:
    """Split s.buf[start:cut] (`"name": {...},\n  "name": {...}...`) into name -> entry text. The values are
    checked to be objects here and fully decoded when used. Each stored text is the piece as split,
    `name": {...}` (from just after the opening quote), to avoid another copy; see entry_value_start.
    The plain pieces (one-byte text, a name without escapes, `": {` after it, `}` at the end) are taken in C
    (_dump_split.c); the loop below goes on from the first other one, with its checks and messages."""
    off = split_members(s.buf, start + 1, cut, raw)
    if off is None:
        return
    pieces = s.buf[off:cut].split(SEP)  # each piece starts just after a name's opening quote
    for piece in pieces:
        try:
            name, end = _scanstring(piece, 0, True)
        except ValueError as exc:
            s.fail(f"bad entry name ({exc})", off)
        if piece.startswith(': {', end):  # the reference's layout: skip the regular expressions
            v = end + 2
        else:
            v = WS.match(piece, end).end()
            if not piece.startswith(":", v):
                s.fail("expected ':' after an entry name", off + v)
            v = WS.match(piece, v + 1).end()
        if not piece.startswith("{", v) or not piece.endswith("}"):
            s.fail(f'entry "{name}" must be an object', off + v)
        raw[name] = piece
        off += len(piece) + len(SEP)


def entry_value_start(text: str) -> int:
    """Where the value starts in a stored entry text (`name": {...}`)."""
    _, end = _scanstring(text, 0, True)
    if text.startswith(': {', end):
        return end + 2
    v = WS.match(text, end).end()
    return WS.match(text, v + 1).end()
