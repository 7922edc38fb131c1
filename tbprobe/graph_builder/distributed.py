"""Cross-rank links of communication nodes (`matched_distributed`): point-to-point calls paired by dst/src and
call order, collectives by process-group id and call order (only when the dump names the group, as the
reference does; the default group is left unlinked)."""
from typing import Dict, List, Optional, Tuple

from tbprobe.graph_builder.model import Graph, Node

__all__ = ["link_ranks"]

_SEND = {"send": "send", "isend": "send"}
_RECV = {"recv": "receive", "irecv": "receive"}
# the collectives with a root, as the reference labels them: (the root's keyword, its position, the root's type);
# the other ranks get the opposite. Every other collective is "send_receive" (tb-graph-ascend's three labels).
_ROOTED = {"broadcast": ("src", 1, "send"), "scatter": ("src", 2, "send"),
           "gather": ("dst", 2, "receive"), "reduce": ("dst", 1, "receive")}
_OPPOSITE = {"send": "receive", "receive": "send"}


def _collective_type(api: str, entry: dict, rank: int) -> str:
    rooted = _ROOTED.get(api)
    if rooted is None:
        return "send_receive"
    key, position, root_type = rooted
    root = _int_arg(entry, key, position)
    return root_type if root is None or root == rank else _OPPOSITE[root_type]


def _api(name: str) -> Optional[str]:
    parts = name.split(".")
    if len(parts) >= 4 and parts[0] == "Distributed" and parts[-1] == "forward":
        return ".".join(parts[1:-2])
    return None


def _int_arg(entry: dict, key: str, position: int) -> Optional[int]:
    item = (entry.get("input_kwargs") or {}).get(key)
    if item is None:
        args = entry.get("input_args") or []
        item = args[position] if len(args) > position else None
    if isinstance(item, dict) and isinstance(item.get("value"), int) and not isinstance(item.get("value"), bool):
        return item["value"]
    return None


def _group(entry: dict) -> Optional[Tuple[str, Tuple[int, ...]]]:
    items = list((entry.get("input_kwargs") or {}).values()) + list(entry.get("input_args") or [])
    for item in items:
        if isinstance(item, dict) and "group_ranks" in item:
            return str(item.get("group_id")), tuple(item.get("group_ranks") or ())
    return None


def _label(node: Node) -> str:
    if node.precision is None:
        return "Nan"
    return str(node.precision if node.precision != int(node.precision) else int(node.precision))


def link_ranks(graphs: List[Graph]) -> int:
    """`graphs`: every rank of one step and side. Sets node.distributed; returns the number of links."""
    sends: Dict[Tuple[int, int], List[Node]] = {}
    recvs: Dict[Tuple[int, int], List[Node]] = {}
    collectives: Dict[Tuple[str, str, int], List[Node]] = {}
    for graph in graphs:
        comm = [n for n in graph.nodes.values() if n.has_entry and _api(n.name)]
        comm.sort(key=lambda n: n.exec_order if n.exec_order is not None else 0)
        counts: Dict[Tuple[str, str], int] = {}
        for node in comm:
            api = _api(node.name) or ""
            entry = node.entry or {}
            if api in _SEND:
                peer = _int_arg(entry, "dst", 1)
                if peer is not None:
                    sends.setdefault((graph.rank, peer), []).append(node)
            elif api in _RECV:
                peer = _int_arg(entry, "src", 1)
                if peer is not None:
                    recvs.setdefault((peer, graph.rank), []).append(node)
            else:
                group = _group(entry)
                if group is not None:
                    k = counts.get((api, group[0]), 0)
                    counts[(api, group[0])] = k + 1
                    collectives.setdefault((api, group[0], k), []).append(node)
                    node.distributed = {"_ranks": group[1], "_rank": graph.rank}
    links = 0
    rank_of = {id(n): g.rank for g in graphs for n in g.nodes.values() if n.has_entry and _api(n.name)}
    for key, send_nodes in sends.items():
        recv_nodes = recvs.get(key, [])
        src, dst = key
        for s, r in zip(send_nodes, recv_nodes):
            s.distributed = {"communications_type": "send", "nodes_info": {str(dst): [_label(r), r.name]}}
            r.distributed = {"communications_type": "receive", "nodes_info": {str(src): [_label(s), s.name]}}
            links += 1
    for (api, _, _), nodes in collectives.items():
        for node in nodes:
            info = {}
            for peer in nodes:
                if peer is not node:
                    info[str(rank_of[id(peer)])] = [_label(peer), peer.name]
            kind = _collective_type(api, node.entry or {}, rank_of[id(node)])
            node.distributed = {"communications_type": kind, "nodes_info": info} if info else None
            links += len(info)
    return links
