"""A compared (or built) `Graph` -> rows for tb_nodes, tb_stack, tbprobe_node_ext and tbprobe_edges."""
import json
from typing import Dict, List, Tuple

from tbprobe.graph_builder.items import data_text, flatten_entry, item_text
from tbprobe.graph_builder.model import Graph

__all__ = ["graph_rows", "COL_MATCHED_DISTRIBUTED", "COL_PRECISION"]

COL_PRECISION = 7
COL_MATCHED_DISTRIBUTED = 13
_dumps = json.dumps


def _data(node, with_md5: bool) -> Tuple[str, str]:
    if node.input_data is not None or node.output_data is not None:
        return node.input_data or "{}", node.output_data or "{}"
    ins, outs = flatten_entry(node.name, node.entry)
    return (data_text([(k, item_text(v, with_md5)) for k, v in ins]),
            data_text([(k, item_text(v, with_md5)) for k, v in outs]))


def graph_rows(graph: Graph, with_md5: bool = False) -> Tuple[List[list], List[Tuple[str, str]], List[tuple],
                                                              List[tuple]]:
    """(node rows in NODE_COLUMNS order as lists, stack rows, node_ext rows, edge rows). Assigns node.order."""
    gid = graph.graph_id
    prefix = gid + "_"
    side, step, rank = graph.side, graph.step, graph.rank
    ddir = graph.dump_data_dir
    stack_ids: Dict[tuple, str] = {}
    stack_rows: List[Tuple[str, str]] = []
    rows: List[list] = []
    ext: List[tuple] = []
    for order, node in enumerate(graph.walk()):
        node.order = order
        lines = node.stack if node.stack is not None else ()
        sid = stack_ids.get(lines)
        if sid is None:
            sid = f"{prefix}{len(stack_ids)}"
            stack_ids[lines] = sid
            stack_rows.append((sid, _dumps(list(lines))))
        parent = node.parent
        match = node.match
        input_data, output_data = _data(node, with_md5)
        name = node.name
        rows.append([
            prefix + name, gid, order, name, node.node_type,
            parent.name if parent is not None else "",
            _dumps([c.name for c in node.children]) if node.children else "",
            node.precision, node.overflow, node.micro_step,
            _dumps(match.path()) if match is not None else "[]",
            sid, "", _dumps(node.distributed) if node.distributed else "{}", 0,
            input_data, output_data, side, ddir, step, rank,
            1 if name.startswith("Distributed.") else 0,
        ])
        ext.append((prefix + name, node.exec_order, node.subtree_precision, node.subtree_overflow,
                    node.worst_metric, _dumps(node.flags) if node.flags else None))
    edges = [(gid, producer, consumer, slot)
             for consumer, slots in graph.edges.items() for slot, producer in slots.items()]
    return rows, stack_rows, ext, edges
