"""construct.json: child -> parent of every node, in execution order (REFERENCE.md section 1).

Forms read: `{child: parent | null | ""}` ("" is the top level in older files) and Megatron's
`{child: [parent, micro_step], ..., "megatron_micro_step_number": N}`. Level L1 writes `{}`.
"""
from dataclasses import dataclass, field
from json import dumps
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

from tbprobe.errors import FormatError
from tbprobe.formats._io import atomic_writer, read_json

__all__ = ["Construct", "load_construct", "write_construct", "MEGATRON_KEY"]

MEGATRON_KEY = "megatron_micro_step_number"


@dataclass
class Construct:
    parents: Dict[str, Optional[str]] = field(default_factory=dict)  # child -> parent; None = top level; in order
    micro_steps: Dict[str, int] = field(default_factory=dict)  # Megatron form only: child -> micro step
    megatron_micro_step_number: Optional[int] = None


def _parent(path: Path, child: str, value: Any) -> Optional[str]:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    raise FormatError(path, f'parent of "{child}" must be a name, null or [name, micro_step], found {value!r:.60}')


_MICRO_STEP_LIMIT = 1 << 31   # (an SQLite INTEGER refused 1e30, a traceback)


def load_construct(path: Union[str, Path]) -> Construct:
    p = Path(path)
    doc = read_json(p, "construct.json")
    if not isinstance(doc, dict):
        raise FormatError(p, f"construct.json must be an object of child -> parent, found {type(doc).__name__}")
    result = Construct()
    parents = result.parents
    for child, value in doc.items():
        if child == MEGATRON_KEY:
            if isinstance(value, bool) or not isinstance(value, int):
                raise FormatError(p, f'"{MEGATRON_KEY}" must be an integer, found {value!r:.60}')
            result.megatron_micro_step_number = value
            continue
        if isinstance(value, list):
            if (len(value) != 2 or isinstance(value[1], bool) or not isinstance(value[1], int)
                    or not 0 <= value[1] < _MICRO_STEP_LIMIT):
                raise FormatError(p, f'"{child}": expected [parent, micro_step], found {value!r:.60}')
            parents[child] = _parent(p, child, value[0])
            result.micro_steps[child] = value[1]
        else:
            parents[child] = _parent(p, child, value)
    return result


def write_construct(
    path: Union[str, Path],
    parents: Mapping[str, Optional[str]],
    micro_steps: Optional[Mapping[str, int]] = None,
    megatron_micro_step_number: Optional[int] = None,
) -> None:
    """Write construct.json byte for byte as the reference does (json.dump with indent 1; null for the top level).
    With `micro_steps`, the Megatron form `[parent, micro_step]` (kept on one line)."""
    lines = []
    for child, parent in parents.items():
        if micro_steps is not None and child in micro_steps:
            value = dumps([parent, micro_steps[child]], ensure_ascii=False)
        else:
            value = dumps(parent, ensure_ascii=False)
        lines.append(f" {dumps(child, ensure_ascii=False)}: {value}")
    if megatron_micro_step_number is not None:
        lines.append(f' "{MEGATRON_KEY}": {int(megatron_micro_step_number)}')
    with atomic_writer(path) as f:
        f.write("{\n" + ",\n".join(lines) + "\n}" if lines else "{}")  # json.dump(indent=1)'s bytes
