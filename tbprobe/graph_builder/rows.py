"""A built (and compared) `Graph` -> rows for tb_nodes, tb_stack, tbprobe_node_ext and tbprobe_edges.

`assign_orders` numbers the nodes in post order and the distinct stacks in order of first use (as the
reference does); `row_maker(graph)` then makes one tb_nodes row from a node and the JSON text of its data."""
import json
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from tbprobe.graph_builder._rowtext import raw_texts
from tbprobe.graph_builder.fast_path import entry_texts
from tbprobe.graph_builder.items import data_text, flatten_entry, item_text
from tbprobe.graph_builder.model import Graph, Node

__all__ = ["assign_orders", "row_maker", "node_texts", "own_texts", "own_rows", "ext_rows", "edge_rows",
           "graph_rows", "COL_MATCHED_DISTRIBUTED", "COL_PRECISION"]

COL_PRECISION = 7
COL_MATCHED_DISTRIBUTED = 13
_dumps = json.dumps
_enc = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def _names_json(names: List[str]) -> str:
    """json.dumps(names) for a list of strings, without the encoder's Python layers (the same bytes)."""
    return "[" + ", ".join(map(_enc, names)) + "]"


def assign_orders(graph: Graph) -> Tuple[List[Node], List[Tuple[str, str]]]:
    """(nodes in post order, tb_stack rows). Sets node.order and node.stack_id."""
    prefix = graph.graph_id + "_"
    stack_ids: Dict[tuple, str] = {}
    stack_rows: List[Tuple[str, str]] = []
    nodes = graph.post = graph.walk()
    for order, node in enumerate(nodes):
        node.order = order
        lines = node.stack if node.stack is not None else ()
        sid = stack_ids.get(lines)
        if sid is None:
            sid = f"{prefix}{len(stack_ids)}"
            stack_ids[lines] = sid
            stack_rows.append((sid, _dumps(list(lines))))
        node.stack_id = sid
    return nodes, stack_rows


def node_texts(node: Node, entry, with_md5: bool) -> Tuple[str, str]:
    """input_data / output_data JSON text of a node's own dump entry (no compare fields)."""
    if not entry:
        return "{}", "{}"
    texts = entry_texts(node.name, entry, with_md5)
    if texts is not None:
        return texts
    ins, outs = flatten_entry(node.name, entry)
    return (data_text([(k, item_text(v, with_md5)) for k, v in ins]),
            data_text([(k, item_text(v, with_md5)) for k, v in outs]))


def own_texts(node: Node, with_md5: bool) -> Tuple[str, str]:
    """node_texts of the node's own entry, made straight from the entry's JSON text when it is plain (most are:
    no decoded dict at all), else from the decoded entry."""
    text = node.stored_text()
    if text is not None:
        texts = raw_texts(node.name, text, with_md5, True)
        if texts is not None:
            return texts
    return node_texts(node, node.entry if node.has_entry else None, with_md5)


def row_maker(graph: Graph) -> Callable[[Node, str, str], list]:
    """`row(node, input_text, output_text)`: one tb_nodes row (NODE_COLUMNS order) of a node of `graph`, as a list
    (so matched_distributed can be patched later). The graph's own columns are read once per graph, not per row."""
    side, step, rank = graph.side, graph.step, graph.rank
    prefix = f"{side}_{step}_{rank}_"
    graph_id = graph.graph_id
    data_dir = graph.dump_data_dir

    def row(node: Node, input_text: str, output_text: str) -> list:
        name = node.name
        parent = node.parent
        children = node.children
        match = node.match
        return [
            prefix + name, graph_id, node.order, name, node.node_type, parent.name if parent is not None else "",
            _names_json([c.name for c in children]) if children else "",
            node.precision, node.overflow, node.micro_step,
            _names_json(match.path()) if match is not None else "[]",
            node.stack_id, "", _dumps(node.distributed) if node.distributed else "{}", 0,
            input_text, output_text, side, data_dir, step, rank,
            1 if name.startswith("Distributed.") else 0,
        ]

    return row


def own_rows(graph: Graph, nodes: List[Node], with_md5: bool) -> Iterator[list]:
    """The row of each of `nodes` with the texts of its own entry (own_texts), in one loop: a plain build writes
    every row this way, and a graph's stored texts are looked up once, not per node."""
    row = row_maker(graph)
    src: object = None
    texts_of: Optional[Dict[str, str]] = None
    for node in nodes:
        texts = None
        if node._entry is None and node.src is not None:
            if node.src is not src:  # one source per graph: its stored texts looked up once
                src = node.src
                stored = getattr(src, "stored_texts", None)
                texts_of = stored() if stored is not None else None
            text = texts_of.get(node.name) if texts_of is not None else node.stored_text()
            if text is not None:
                texts = raw_texts(node.name, text, with_md5, True)
        if texts is None:
            texts = node_texts(node, node.entry if node.has_entry else None, with_md5)
        yield row(node, texts[0], texts[1])


def ext_rows(graph: Graph) -> List[tuple]:
    prefix = graph.graph_id + "_"
    return [(prefix + n.name, n.exec_order, n.subtree_precision, n.subtree_overflow, n.worst_metric,
             _dumps(n.flags) if n.flags else None) for n in graph.nodes.values()]


def edge_rows(graph: Graph) -> List[tuple]:
    gid = graph.graph_id
    return [(gid, producer, consumer, slot)
            for consumer, slots in graph.edges.items() for slot, producer in slots.items()]


def graph_rows(graph: Graph, with_md5: bool = False) -> Tuple[List[list], List[Tuple[str, str]], List[tuple],
                                                              List[tuple]]:
    """Everything of one graph at once (for callers that want lists: the collector's live build graph)."""
    nodes, stacks = assign_orders(graph)
    row = row_maker(graph)
    rows = []
    for node in nodes:
        if node.input_data is not None or node.output_data is not None:
            texts = (node.input_data or "{}", node.output_data or "{}")
        else:
            texts = node_texts(node, node.entry if node.has_entry else None, with_md5)
        rows.append(row(node, *texts))
    return rows, stacks, ext_rows(graph), edge_rows(graph)
