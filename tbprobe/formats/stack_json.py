"""stack.json: the Python call stack of each forward node (REFERENCE.md section 1).

New form (written): `{"0": [[names sharing this stack...], ["File <path>, line <n>, in <func>, \\n <code>", ...]]}`.
Old form (read): `{name: [lines]}`. Identical stacks share one tuple and lines are interned, because a model
repeats the same frames thousands of times.
"""
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

from tbprobe.errors import FormatError
from tbprobe.formats._io import atomic_writer, read_json

__all__ = ["Stacks", "load_stack", "write_stack"]


@dataclass
class Stacks:
    stacks: List[Tuple[str, ...]] = field(default_factory=list)  # distinct stacks
    by_name: Dict[str, int] = field(default_factory=dict)  # node name -> index into stacks

    def get(self, name: str) -> Tuple[str, ...]:
        """The stack of a node, () when it has none (backward nodes never do)."""
        i = self.by_name.get(name)
        return self.stacks[i] if i is not None else ()


def _lines(path: Path, where: str, value: Any) -> Tuple[str, ...]:
    if isinstance(value, str):
        return (sys.intern(value),)
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise FormatError(path, f"{where}: stack lines must be a list of strings, found {value!r:.60}")
    return tuple(sys.intern(x) for x in value)


def _is_new_form(doc: Dict[str, Any]) -> bool:
    for value in doc.values():
        return isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
    return True


def load_stack(path: Union[str, Path]) -> Stacks:
    p = Path(path)
    doc = read_json(p, "stack.json")
    if not isinstance(doc, dict):
        raise FormatError(p, f"stack.json must be an object, found {type(doc).__name__}")
    result = Stacks()
    index: Dict[Tuple[str, ...], int] = {}

    def intern_stack(lines: Tuple[str, ...]) -> int:
        i = index.get(lines)
        if i is None:
            i = index[lines] = len(result.stacks)
            result.stacks.append(lines)
        return i

    if _is_new_form(doc):
        for key, value in doc.items():
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)):
                raise FormatError(p, f'stack "{key}": expected [[names], [lines]], found {value!r:.60}')
            names, lines = value
            i = intern_stack(_lines(p, f'stack "{key}"', lines))
            for name in names:
                if not isinstance(name, str):
                    raise FormatError(p, f'stack "{key}": node names must be strings, found {name!r:.60}')
                result.by_name[name] = i
    else:
        for name, lines in doc.items():
            result.by_name[name] = intern_stack(_lines(p, f'"{name}"', lines))
    return result


def write_stack(path: Union[str, Path], by_name: Mapping[str, Sequence[str]]) -> None:
    """Write the new form: names with identical stacks share one record, records in first-use order."""
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for name, lines in by_name.items():
        groups.setdefault(tuple(lines), []).append(name)
    doc = {str(i): [names, list(lines)] for i, (lines, names) in enumerate(groups.items())}
    with atomic_writer(path) as f:  # the reference's bytes exactly (indent 1, no final newline)
        json.dump(doc, f, indent=1, ensure_ascii=False)
