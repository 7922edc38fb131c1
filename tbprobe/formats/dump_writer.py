"""Writing dump.json: DumpWriter collects entries as the collector produces them and writes the file once,
atomically, in a layout the reference reads (and tbprobe's reader takes on its fast path)."""
import json
from pathlib import Path
from typing import IO, Any, Dict, List, Mapping, Optional, Union

from tbprobe.formats._io import atomic_writer

__all__ = ["DumpWriter", "write_dump", "save_dump"]


def _jsonable(o: Any) -> Any:
    """numpy / torch scalars, sets and read-only mappings (LazyEntries) turned into JSON values."""
    if isinstance(o, Mapping):
        return dict(o.items())
    item = getattr(o, "item", None)
    if callable(item):
        return item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=True, default=_jsonable, separators=(", ", ": ")).encode


class DumpWriter:
    """Collects dump.json entries and writes the file once, atomically (temp name + rename).

        w = DumpWriter(path, task="statistics", level="mix", framework="pytorch", dump_data_dir=None)
        w.add(name, entry)          # as calls complete; the same name again replaces the entry
        w.close()                   # writes; also on leaving a `with` block without an exception

    Entries keep the key order they are given (build tensor items with `tensor_item` for the reference's order).
    NaN / inf floats are written as the tokens NaN / Infinity / -Infinity, as the reference does. Each entry goes on
    one line (`indent=None`, the fast C encoder) or pretty-printed like the reference (`indent=1`)."""

    def __init__(
        self,
        path: Union[str, Path],
        task: str,
        level: str,
        framework: str = "pytorch",
        dump_data_dir: Optional[str] = None,
        indent: Optional[int] = None,
    ):
        self.path = Path(path)
        self.header = {"task": task, "level": level, "framework": framework, "dump_data_dir": dump_data_dir}
        self.indent = indent
        self.entries: Dict[str, Any] = {}
        self.closed = False

    def add(self, name: str, entry: Mapping[str, Any]) -> None:
        if self.closed:
            raise ValueError(f"{self.path}: DumpWriter already closed")
        self.entries[name] = entry

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def close(self) -> None:
        """Write the file (once). Later calls do nothing."""
        if self.closed:
            return
        self.closed = True
        with atomic_writer(self.path) as f:
            write_dump(f, self.header, self.entries, self.indent)

    def discard(self) -> None:
        """Drop the entries without writing."""
        self.closed = True
        self.entries = {}

    def __enter__(self) -> "DumpWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


def write_dump(f: IO[str], header: Mapping[str, Any], entries: Mapping[str, Any], indent: Optional[int] = None) -> None:
    """Write a dump.json document to an open text file."""
    if indent is not None:
        doc = dict(header)
        doc["data"] = entries
        json.dump(doc, f, indent=indent, ensure_ascii=False, allow_nan=True, default=_jsonable)
        return
    enc = _ENCODE
    parts: List[str] = ["{\n"]
    for k, v in header.items():
        parts.append(f" {enc(k)}: {enc(v)},\n")
    parts.append(' "data": {')
    f.write("".join(parts))
    sep = "\n  "
    buf: List[str] = []
    for name, entry in entries.items():
        buf.append(f"{sep}{enc(name)}: {enc(entry)}")
        sep = ",\n  "
        if len(buf) >= 1024:
            f.write("".join(buf))
            buf.clear()
    f.write("".join(buf))
    f.write("\n }\n}\n" if entries else "}\n}\n")


# Kept for callers that want to write without a DumpWriter (e.g. re-writing a loaded DumpFile).
def save_dump(dump: Any, path: Union[str, Path, None] = None, indent: Optional[int] = None) -> Path:
    target = Path(path) if path is not None else dump.path
    header = {"task": dump.task, "level": dump.level, "framework": dump.framework, "dump_data_dir": dump.dump_data_dir}
    with atomic_writer(target) as f:
        write_dump(f, header, dump.entries, indent)
    return target
