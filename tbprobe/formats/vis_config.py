"""Side files next to a graph database: manual matches (`*.vis.config`) and colour legends (`<file>.legend.json`).

`<tag>_<step>_<rank>.vis.config` holds {debug_node_name: bench_node_name}, as tb-graph-ascend writes it.
`<db file>.legend.json` holds the edited legend, {colour: {"value": [lo, hi], "description": str}} like tb_config's
node_colors: tbprobe keeps user edits there instead of rewriting the user's database.
Both are written atomically (temporary name + rename).
"""
import json
from pathlib import Path
from typing import Any, Dict, Mapping, Union

from tbprobe.errors import FormatError
from tbprobe.formats._io import atomic_write_text, read_json

__all__ = ["load_matches", "save_matches", "match_config_name", "load_legend", "save_legend", "legend_path"]


def match_config_name(tag: str, step: int, rank: int) -> str:
    return f"{tag}_{step}_{rank}.vis.config"


def load_matches(path: Union[str, Path]) -> Dict[str, str]:
    """{debug node: bench node}; a missing file is an empty mapping."""
    p = Path(path)
    if not p.exists():
        return {}
    doc = read_json(p, ".vis.config")
    if not isinstance(doc, dict):
        raise FormatError(p, f"a .vis.config must be an object of debug -> bench node names, found {type(doc).__name__}")
    for k, v in doc.items():
        if not isinstance(v, str):
            raise FormatError(p, f'match of "{k}" must be a node name, found {v!r:.60}')
    return doc


def save_matches(path: Union[str, Path], matches: Mapping[str, str]) -> None:
    atomic_write_text(path, json.dumps(dict(matches), ensure_ascii=False, indent=4) + "\n")


def legend_path(db_path: Union[str, Path]) -> Path:
    p = Path(db_path)
    return p.with_name(p.name + ".legend.json")


def load_legend(path: Union[str, Path]) -> Dict[str, Any]:
    """{colour: {"value": [...], "description": ...}}; a missing file is an empty mapping."""
    p = Path(path)
    if not p.exists():
        return {}
    doc = read_json(p, "legend file")
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise FormatError(p, "a legend must be an object of colour -> {value, description}")
    return doc


def save_legend(path: Union[str, Path], legend: Mapping[str, Any]) -> None:
    atomic_write_text(path, json.dumps(dict(legend), ensure_ascii=False, indent=1) + "\n")
