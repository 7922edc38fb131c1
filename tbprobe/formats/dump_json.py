"""dump.json: the per-rank record of every module/API call (REFERENCE.md section 1).

`load_dump` reads the file once, block by block, and never holds the whole text beside the result. By default
(lazy) each entry is kept as its JSON text and decoded by the C JSON scanner when it is used: a 100 MB dump costs
about its own size in memory instead of three to four times that as dicts, and the reference's habit of loading
a file several times per command is replaced by one read. `lazy=False` decodes everything up front into a dict.
NaN / Infinity / -Infinity tokens become floats either way.

Writing is `DumpWriter` (dump_writer.py, re-exported here).
"""
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

from tbprobe.errors import FormatError
from tbprobe.formats import _json_stream
from tbprobe.formats._dump_parse import entry_value_start, parse_dump
from tbprobe.formats._io import is_long_int_error, long_int, long_int_problem
from tbprobe.formats._json_stream import Stream, decode_problem, json_type
from tbprobe.formats.dump_writer import DumpWriter, save_dump, write_dump

__all__ = ["DumpFile", "LazyEntries", "load_dump", "iter_tensor_items", "DumpWriter", "write_dump", "save_dump",
           "tensor_item", "ITEM_KEY_ORDER"]

# Keys of a tensor item in the order the reference writes them. An xor checksum item has no statistics and puts
# md5 before requires_grad, as the reference does.
ITEM_KEY_ORDER = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad", "md5", "data_name")

_TOP_KEYS = {"task": str, "level": str, "framework": str, "dump_data_dir": (str, type(None)), "data": dict}
_BLOCK = _json_stream.BLOCK  # read size; tests shrink it to cut entries at every possible place
_scan_once = json.JSONDecoder().scan_once

try:  # optional: decodes an entry about 3x faster than the json module, to the same dict (see decode_entry)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None
# ASCII digits -> "0", "." "e" "E" -> "x", any other byte -> " ": " " + 19 zeros then marks 19+ digits in a row that
# do not follow a decimal point or an exponent mark: an integer part that long (or, harmlessly, such a run in a
# string or an exponent)
_DIGIT_RUNS = bytes(48 if 48 <= c <= 57 else 120 if c in b".eE" else 32 for c in range(256))
_LONG_INT = b" " + b"0" * 19


class LazyEntries(Mapping):
    """name -> entry (a dict), in file order, decoded from the entry's JSON text on each access.

    A read-only Mapping: `entries[name]`, `.get`, `.items()`, `in`, `len` work as on a dict. Each access decodes
    a fresh dict (keep it if you need it twice; changing it does not change the mapping). A broken entry raises
    FormatError naming the file and the entry when it is used; `validate()` decodes all of them now."""

    __slots__ = ("path", "_raw")

    def __init__(self, path: Path, raw: Dict[str, str]):
        self.path = path
        self._raw = raw

    def __getitem__(self, name: str) -> dict:
        return decode_entry(self.path, name, self._raw[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __repr__(self) -> str:
        return f"<LazyEntries {self.path}: {len(self._raw)} entries>"

    def raw(self, name: str) -> str:
        """The entry's JSON text as found in the file."""
        text = self._raw[name]
        return text[entry_value_start(text):]

    def stored(self, name: str) -> str:
        """The entry's text as kept (`name": {...}`, from just after the name's opening quote): no copy."""
        return self._raw[name]

    def stored_texts(self) -> Mapping[str, str]:
        """name -> stored text (see `stored`) for every entry, read-only: a loop over many names can then look
        each one up without a Python call."""
        return MappingProxyType(self._raw)

    def validate(self) -> None:
        for name, text in self._raw.items():
            decode_entry(self.path, name, text)

    def to_dict(self) -> Dict[str, dict]:
        return {name: decode_entry(self.path, name, text) for name, text in self._raw.items()}


def decode_entry(path: Path, name: str, text: str) -> dict:
    """Decode a stored entry text (`name": {...}`, see _dump_parse) to its dict."""
    start = entry_value_start(text)
    if _orjson is not None and text.endswith("}"):
        # orjson gives the json module's dict (same floats: both round correctly; same key order; the last of
        # repeated keys) except that it reads integers beyond 64 bits as floats: entries with an integer part
        # of 19+ digits go to the json module, as does anything orjson refuses (NaN / Infinity tokens, lone
        # surrogates, numbers beyond the float range, deep nesting, bad syntax: the json module then says
        # what is wrong). The text must end with the entry's brace: orjson would also take trailing blanks.
        try:
            data = text[start:].encode()
            if _LONG_INT not in data.translate(_DIGIT_RUNS):
                entry = _orjson.loads(data)
                if type(entry) is dict:
                    return entry
        except (ValueError, UnicodeError):
            pass
    try:
        entry, end = _scan_once(text, start)
    except (StopIteration, ValueError) as exc:
        if is_long_int_error(exc):   # (Python's words, and no position)
            found = long_int(text, start)
            where = f" at character {found[0] - start} of the entry" if found else ""
            raise FormatError(path, f'entry "{name}": invalid JSON{where}: '
                                    f'{long_int_problem(found[1] if found else None)}') from None
        at = exc.value if isinstance(exc, StopIteration) else getattr(exc, "pos", None)
        where = f" at character {at - start} of the entry" if isinstance(at, int) else ""
        raise FormatError(path, f'entry "{name}": invalid JSON ({decode_problem(exc)}{where})') from None
    except RecursionError:
        raise FormatError(path, f'entry "{name}": JSON nested too deeply') from None
    if end != len(text):
        raise FormatError(path, f'entry "{name}": invalid JSON (extra data after the entry)')
    if type(entry) is not dict:
        raise FormatError(path, f'entry "{name}" must be an object, found {json_type(entry)}')
    return entry


@dataclass
class DumpFile:
    path: Path
    task: str
    level: str
    framework: str
    dump_data_dir: Optional[str]
    # name -> entry, in file (completion) order: LazyEntries (default) or a dict (lazy=False)
    entries: Mapping[str, dict] = field(default_factory=dict)


def load_dump(path: Union[str, Path], lazy: bool = True) -> DumpFile:
    """Read one dump.json. Raises FormatError for a missing, truncated, non-UTF-8 or wrongly shaped file (with
    lazy, a syntax error inside an entry is reported when that entry is used, or by entries.validate())."""
    p = Path(path)
    try:
        f = open(p, "rb")
    except FileNotFoundError:
        raise FormatError(p, "missing dump.json") from None
    except IsADirectoryError:
        raise FormatError(p, "expected dump.json, found a folder") from None
    except OSError as exc:
        raise FormatError(p, f"cannot read: {exc.strerror or exc}") from None
    with f:
        try:
            top, entries = parse_dump(Stream(p, f, _BLOCK), lazy)
        except RecursionError:
            raise FormatError(p, "JSON nested too deeply") from None
        except MemoryError:
            raise FormatError(p, "out of memory while reading") from None
    for key, types in _TOP_KEYS.items():
        if key not in top:
            if key == "data":
                raise FormatError(p, 'not a dump.json: no "data" object')
            top[key] = None if key == "dump_data_dir" else ""
        elif key != "data" and not isinstance(top[key], types):
            raise FormatError(p, f'"{key}" must be a string, found {json_type(top[key])}')
    return DumpFile(
        path=p,
        task=top["task"],
        level=top["level"],
        framework=top["framework"],
        dump_data_dir=top["dump_data_dir"],
        entries=LazyEntries(p, entries) if lazy else entries,
    )


def iter_tensor_items(entry: Mapping[str, Any]) -> Iterator[Tuple[str, dict]]:
    """(param_key suffix, item) for every item of an entry, in the reference's order: input_args -> input.<i>,
    input_kwargs -> input.<k>, input -> input.<i>, output -> output.<i>, parameters -> parameters.<name>, and for
    a parameters_grad entry <name> (its list items as <name>.<i> when there are several). Nested lists give
    `.i.j`. Items are dicts with a "type" key (tensors and scalars alike); null slots are skipped."""
    for key, value in entry.items():
        if key in ("input_args", "input"):
            yield from _flatten("input", value)
        elif key == "input_kwargs":
            if isinstance(value, dict):
                for k, v in value.items():
                    yield from _flatten(f"input.{k}", v)
        elif key == "output":
            yield from _flatten("output", value)
        elif key == "parameters":
            if isinstance(value, dict):
                for k, v in value.items():
                    yield from _flatten(f"parameters.{k}", v)
        else:  # parameters_grad: {param_name: [item]}
            if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
                yield key, value[0]
            else:
                yield from _flatten(key, value)


def _flatten(prefix: str, value: Any) -> Iterator[Tuple[str, dict]]:
    if isinstance(value, dict):
        if "type" in value or not value:
            if value:
                yield prefix, value
            return
        for k, v in value.items():  # a dict argument holding tensors
            yield from _flatten(f"{prefix}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _flatten(f"{prefix}.{i}", v)


def tensor_item(
    dtype: str,
    shape: Sequence[int],
    max: Any = None,
    min: Any = None,
    mean: Any = None,
    norm: Any = None,
    requires_grad: bool = False,
    md5: Optional[str] = None,
    data_name: Optional[str] = None,
    type: str = "torch.Tensor",
    stats: bool = True,
) -> Dict[str, Any]:
    """A tensor item with its keys in the reference's order. stats=False gives the xor-checksum form (no four
    statistics; md5 before requires_grad)."""
    item: Dict[str, Any] = {"type": type, "dtype": dtype, "shape": list(shape)}
    if stats:
        item["Max"] = max
        item["Min"] = min
        item["Mean"] = mean
        item["Norm"] = norm
        item["requires_grad"] = requires_grad
        if md5 is not None:
            item["md5"] = md5
    else:
        if md5 is not None:
            item["md5"] = md5
        item["requires_grad"] = requires_grad
    if data_name is not None:
        item["data_name"] = data_name
    return item
