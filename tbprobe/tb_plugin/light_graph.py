"""The first view of a big graph straight from SQLite, before its in-memory index is built.

Building a GraphIndex reads every row of the graph (the rows carry all tensor statistics: 300 MB for 100k nodes
a side), which made the first open of a big file wait for seconds. The first view only needs the root and its
children: both come from the reference schema's index on (step, rank, data_source, up_node, node_order), reading
only the leading columns of the rows they return (never input_data/output_data). What such answers cannot know
without the whole graph is the roll-up of each subtree: they carry ``subtree_precision`` and ``subtree_overflow``
as null and ``"partial": true``, and the client asks again once the index (built in the background) is ready.

Used only for graphs with exactly one parentless node (the root); ``order`` is the stored node_order, which is
the index's numbering too when node_order numbers the graph 0..n-1 (as msprobe and tbprobe write it).
"""
import sqlite3
from typing import Dict, List, Optional

from tbprobe.tb_plugin.api_error import ApiError, quoted
from tbprobe.tb_plugin.graph_index import OVERFLOW_LEVELS, int_sql, stored_int
from tbprobe.tb_plugin.request_params import INT32

__all__ = ["eligible", "root_summary", "child_summaries"]

_COLUMNS = (
    f"n.node_name, {int_sql('n.node_type')}, n.precision_index,"
    " CASE n.overflow_level WHEN 'medium' THEN 1 WHEN 'high' THEN 2 WHEN 'critical' THEN 3 ELSE 0 END,"
    f" {int_sql('n.micro_step_id')},"
    " (n.matched_node_link IS NOT NULL AND n.matched_node_link NOT IN ('', '[]')), n.node_order,"
    # the child count comes from the (step, rank, data_source, up_node, node_order) index alone
    " (SELECT COUNT(*) FROM tb_nodes c WHERE c.step = n.step AND c.rank = n.rank"
    " AND c.data_source = n.data_source AND c.up_node = n.node_name)"
)
_GRAPH = "n.step = ? AND n.rank = ? AND n.data_source = ?"


def eligible(conn: sqlite3.Connection, step: int, rank: int, side: str) -> bool:
    """True when the graph has exactly one parentless node (two index seeks). With several, or none, the index
    hangs the extra ones under the root, which only a full read can find."""
    roots = conn.execute(
        f"SELECT (SELECT COUNT(*) FROM tb_nodes n WHERE {_GRAPH} AND n.up_node IS NULL)"
        f" + (SELECT COUNT(*) FROM tb_nodes n WHERE {_GRAPH} AND n.up_node = '')",
        (step, rank, side) * 2).fetchone()[0]
    return roots == 1


def _summary(row, source: str) -> dict:
    """A summary as the index gives it; a wrongly typed value is the same 400 as from the index (stored_int)."""
    name, ntype, prec, ovf, micro, matched, order, n_children = row
    if not isinstance(name, str):  # (NULL or a blob: the same 400 as the index's; bytes were a 500 in the JSON)
        raise ApiError(400, f"{source}: column node_name of the node at node_order {str(order)[:40]} holds "
                            f"{'NULL' if name is None else 'a blob or a number'}, not a name")
    try:
        precision: Optional[float] = None if prec is None or prec == "" else float(prec)
    except (TypeError, ValueError):
        precision = None
    if precision is not None and precision != precision:
        precision = None
    return {"name": name, "type": stored_int(ntype, source, "node_type", name, -(1 << 15), (1 << 15) - 1),
            "n_children": int(n_children), "precision": precision,
            "overflow": OVERFLOW_LEVELS[ovf] or None, "subtree_precision": None, "subtree_overflow": None,
            "matched": bool(matched),
            "micro_step": stored_int(micro, source, "micro_step_id", name, *INT32),
            "order": stored_int(order, source, "node_order", name)}


def root_summary(conn: sqlite3.Connection, step: int, rank: int, side: str, source: str = "this file") -> dict:
    row = conn.execute(f"SELECT {_COLUMNS} FROM tb_nodes n WHERE {_GRAPH} AND (n.up_node IS NULL OR n.up_node = '')"
                       " ORDER BY n.node_order DESC LIMIT 1", (step, rank, side)).fetchone()
    if row is None:
        raise ApiError(404, f"no graph for step {step}, rank {rank}, side {side} in this file")
    return _summary(row, source)


def child_summaries(conn: sqlite3.Connection, step: int, rank: int, side: str, node: str,
                    micro_step: int = -1, source: str = "this file") -> List[Dict]:
    """Summaries of the direct children of ``node`` in execution order; 404 for an unknown node."""
    micro = " AND n.micro_step_id = ?" if micro_step >= 0 else ""
    args = (step, rank, side, node) + ((micro_step,) if micro_step >= 0 else ())
    rows = conn.execute(f"SELECT {_COLUMNS} FROM tb_nodes n WHERE {_GRAPH} AND n.up_node = ?{micro}"
                        " ORDER BY n.node_order", args).fetchall()
    if not rows:
        exists = conn.execute(f"SELECT 1 FROM tb_nodes n WHERE {_GRAPH} AND n.node_name = ? LIMIT 1",
                              (step, rank, side, node)).fetchone()
        if exists is None:
            raise ApiError(404, f"no node named {quoted(node)} in this graph")
    return [_summary(r, source) for r in rows]
