"""Reading a .vis.db, the reference's or tbprobe's. Queries follow the reference's indexes (step, rank,
data_source first), so each one touches only the graph asked for."""
import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from tbprobe.errors import FormatError
from tbprobe.formats._vis_sql import open_db
from tbprobe.formats.vis_schema import CONFIG_COLUMNS, EDGE_COLUMNS, FINDING_COLUMNS, NODE_COLUMNS, NODE_EXT_COLUMNS

__all__ = ["VisDbReader", "decode_node", "REQUIRED_TABLES"]

REQUIRED_TABLES = ("tb_nodes", "tb_stack", "tb_config")
_NODE_SELECT = "SELECT " + ", ".join(NODE_COLUMNS) + " FROM tb_nodes"
# JSON-valued tb_nodes columns and what an empty value ('' or NULL) means.
_JSON_COLUMNS = {
    "sub_nodes": list,
    "matched_node_link": list,
    "input_data": dict,
    "output_data": dict,
    "parallel_merge_info": dict,
    "matched_distributed": dict,
}
_CONFIG_JSON = ("tool_tip", "node_colors", "rank_list", "step_list")


def _loads(db: Path, what: str, text: Any, empty: Any) -> Any:
    if text is None or text == "":
        return empty()
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise FormatError(db, f"{what} is not valid JSON ({exc})") from None


def decode_node(db: Path, row: Dict[str, Any]) -> Dict[str, Any]:
    """A node row with its JSON columns parsed (sub_nodes and matched_node_link -> lists, the others -> dicts)."""
    out = dict(row)
    for col, empty in _JSON_COLUMNS.items():
        if col in out:
            out[col] = _loads(db, f"{col} of node {row.get('node_name')!r}", out[col], empty)
    return out


class VisDbReader:
    """Read-only view of one .vis.db. A corrupt or foreign SQLite file raises FormatError naming it."""

    def __init__(self, path: Union[str, "os.PathLike[str]"]):
        self.path = Path(path)
        self.conn = open_db(self.path, readonly=True)
        try:
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise FormatError(self.path, f"not a readable SQLite database ({exc})") from None
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            self.conn.close()
            raise FormatError(self.path, f"not a .vis.db graph database: no {', '.join(missing)} table")
        self.tables = tables
        self._meta: Optional[Dict[str, str]] = None

    # --- plumbing -------------------------------------------------------------------------------------------
    def _rows(self, sql: str, args: Tuple[Any, ...] = ()) -> List[tuple]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise FormatError(self.path, f"cannot read the database ({exc})") from None

    def _nodes(self, where: str, args: Tuple[Any, ...], parse_json: bool, order: str = " ORDER BY node_order"):
        for row in self._rows(f"{_NODE_SELECT} WHERE {where}{order}", args):
            node = dict(zip(NODE_COLUMNS, row))
            yield decode_node(self.path, node) if parse_json else node

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "VisDbReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- tbprobe metadata -----------------------------------------------------------------------------------
    @property
    def is_tbprobe(self) -> bool:
        return "tbprobe_meta" in self.tables

    def meta(self) -> Dict[str, str]:
        if self._meta is None:
            self._meta = dict(self._rows("SELECT key, value FROM tbprobe_meta")) if self.is_tbprobe else {}
        return self._meta

    @property
    def schema_version(self) -> Optional[int]:
        value = self.meta().get("schema_version")
        try:
            return int(value) if value is not None else None
        except ValueError:
            raise FormatError(self.path, f"tbprobe_meta schema_version is not a number: {value!r}") from None

    # --- tb_config ------------------------------------------------------------------------------------------
    def config_row(self) -> Optional[tuple]:
        """The tb_config row as stored (CONFIG_COLUMNS order), or None."""
        rows = self._rows(f"SELECT {', '.join(CONFIG_COLUMNS)} FROM tb_config ORDER BY id = '1' DESC, id LIMIT 1")
        return rows[0] if rows else None

    def config(self) -> Dict[str, Any]:
        """tb_config with its JSON fields parsed: graph_type, task, tool_tip, micro_steps, overflow_check,
        node_colors, rank_list, step_list."""
        row = self.config_row()
        if row is None:
            raise FormatError(self.path, "tb_config is empty")
        cfg = dict(zip(CONFIG_COLUMNS, row))
        cfg.pop("id")
        for key in _CONFIG_JSON:
            cfg[key] = _loads(self.path, f"tb_config.{key}", cfg[key], lambda: None)
        return cfg

    # --- graphs and nodes -----------------------------------------------------------------------------------
    def graphs(self) -> List[Tuple[int, int, str]]:
        """(step, rank, side) of every graph, side "NPU" before "Bench"."""
        rows = self._rows("SELECT DISTINCT step, rank, data_source FROM tb_nodes")
        return sorted(((s, r, d) for s, r, d in rows), key=lambda t: (t[0], t[1], t[2] != "NPU", str(t[2])))

    def node_count(self, step: Optional[int] = None, rank: Optional[int] = None, side: Optional[str] = None) -> int:
        conds, args = [], []
        for col, val in (("step", step), ("rank", rank), ("data_source", side)):
            if val is not None:
                conds.append(f"{col} = ?")
                args.append(val)
        where = (" WHERE " + " AND ".join(conds)) if conds else ""
        return self._rows(f"SELECT count(*) FROM tb_nodes{where}", tuple(args))[0][0]

    def nodes(self, step: int, rank: int, side: str, parse_json: bool = False) -> Iterator[Dict[str, Any]]:
        """Every node of one graph in node_order (post-order: children first, root last). Values as stored
        (JSON columns are text) unless parse_json."""
        return self._nodes("step = ? AND rank = ? AND data_source = ?", (step, rank, side), parse_json)

    def node(self, step: int, rank: int, side: str, name: str, parse_json: bool = False) -> Optional[Dict[str, Any]]:
        found = list(self._nodes("step = ? AND rank = ? AND data_source = ? AND node_name = ?",
                                 (step, rank, side, name), parse_json, order=""))
        return found[0] if found else None

    def children(self, step: int, rank: int, side: str, parent: str, parse_json: bool = False) -> List[Dict[str, Any]]:
        """The direct children of `parent`, in node_order (their execution order)."""
        return list(self._nodes("step = ? AND rank = ? AND data_source = ? AND up_node = ?",
                                (step, rank, side, parent), parse_json))

    def root(self, step: int, rank: int, side: str, parse_json: bool = False) -> Optional[Dict[str, Any]]:
        """The root node (up_node '' or NULL; the reference calls it DefaultModel)."""
        found = list(self._nodes("step = ? AND rank = ? AND data_source = ? AND (up_node = '' OR up_node IS NULL)",
                                 (step, rank, side), parse_json))
        return found[-1] if found else None

    def node_names(self, step: int, rank: int, side: str) -> List[str]:
        return [r[0] for r in self._rows("SELECT node_name FROM tb_nodes WHERE step = ? AND rank = ? AND "
                                         "data_source = ? ORDER BY node_order", (step, rank, side))]

    # --- tb_stack -------------------------------------------------------------------------------------------
    def stacks(self) -> Dict[str, List[str]]:
        return {sid: _loads(self.path, f"stack {sid!r}", info, list)
                for sid, info in self._rows("SELECT id, stack_info FROM tb_stack")}

    def stack(self, stack_id: str) -> Optional[List[str]]:
        rows = self._rows("SELECT stack_info FROM tb_stack WHERE id = ?", (stack_id,))
        return _loads(self.path, f"stack {stack_id!r}", rows[0][0], list) if rows else None

    # --- tbprobe's own tables (empty for reference files) ---------------------------------------------------
    def node_ext(self, graph_id: str) -> Dict[str, Dict[str, Any]]:
        """tbprobe_node_ext rows of one graph (ids start with `<graph_id>_`), by node id."""
        if "tbprobe_node_ext" not in self.tables:
            return {}
        rows = self._rows(f"SELECT {', '.join(NODE_EXT_COLUMNS)} FROM tbprobe_node_ext WHERE id >= ? AND id < ?",
                          (graph_id + "_", graph_id + "`"))  # '`' is the character after '_'
        return {r[0]: dict(zip(NODE_EXT_COLUMNS, r)) for r in rows}

    def findings(self, graph_id: Optional[str] = None) -> List[Dict[str, Any]]:
        if "tbprobe_findings" not in self.tables:
            return []
        where, args = (" WHERE graph_id = ?", (graph_id,)) if graph_id is not None else ("", ())
        rows = self._rows(f"SELECT {', '.join(FINDING_COLUMNS)} FROM tbprobe_findings{where} ORDER BY graph_id, kind",
                          args)
        return [dict(zip(FINDING_COLUMNS, r)) for r in rows]

    def edges(self, graph_id: str) -> List[Tuple[str, str, str, str]]:
        if "tbprobe_edges" not in self.tables:
            return []
        return [tuple(r) for r in self._rows(f"SELECT {', '.join(EDGE_COLUMNS)} FROM tbprobe_edges WHERE graph_id = ?"
                                             " ORDER BY rowid", (graph_id,))]
