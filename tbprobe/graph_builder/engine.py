"""One rank pair in, rows out: load -> build -> match -> compare -> overflow -> roll-up -> rows.

Runs in a worker process for multi-rank inputs, so everything it returns is plain data (rows, counts and small
stand-in nodes for the cross-rank links)."""
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from tbprobe.errors import TbprobeError
from tbprobe.formats.dump_dir import RankDir
from tbprobe.graph_builder.build import is_forward
from tbprobe.graph_builder.compare import compare_entries
from tbprobe.graph_builder.items import flatten_entry, is_tensor_item
from tbprobe.graph_builder.load import detect_mode, load_rank
from tbprobe.graph_builder.match import match_graphs
from tbprobe.graph_builder.metrics import tensor_metrics
from tbprobe.graph_builder.model import NODE_API_COLLECTION, Graph, Node
from tbprobe.graph_builder.overflow import mark_overflow
from tbprobe.graph_builder.rollup import findings_rows, roll_up
from tbprobe.graph_builder.rows import graph_rows

__all__ = ["Options", "RankResult", "process_rank", "compare_graph_pair"]


@dataclass
class Options:
    overflow_check: bool = False
    fuzzy: bool = False
    align: bool = True
    layer_map: Optional[Mapping] = None
    manual: Optional[Mapping[str, str]] = None
    tensor_workers: int = 1


@dataclass
class RankResult:
    step: int
    rank: int
    mode: Optional[str]
    micro_steps: int
    node_rows: List[list]
    stack_rows: List[tuple]
    ext_rows: List[tuple]
    edge_rows: List[tuple]
    finding_rows: List[tuple]
    comm: Dict[str, List[Node]] = field(default_factory=dict)   # side -> stand-ins of Distributed.* nodes
    counts: Dict[str, int] = field(default_factory=dict)
    first_divergence: Optional[str] = None
    first_overflow: Optional[str] = None
    nodes_per_side: int = 0


def _comm_stubs(graph: Graph) -> List[Node]:
    out = []
    for node in graph.nodes.values():
        if node.entry and node.name.startswith("Distributed."):
            stub = Node(node.name, node.node_type, node.entry)
            stub.exec_order = node.exec_order
            stub.precision = node.precision
            out.append(stub)
    return out


def _tensor_job(args: Tuple[str, str, str]):
    key, dpath, bpath = args
    return key, tensor_metrics(dpath, bpath)


def _tensor_results(debug: Graph, bench: Graph, workers: int) -> Dict[str, tuple]:
    """Real-data metrics of every tensor pair, each file read once, in worker processes when allowed."""
    pairs = []
    ddir = debug.dump_data_dir or ""
    bdir = bench.dump_data_dir or ""
    for node in debug.nodes.values():
        b = node.match
        if b is None or not node.entry or not b.entry:
            continue
        d_in, d_out = flatten_entry(node.name, node.entry)
        b_in, b_out = flatten_entry(b.name, b.entry)
        cut_b = len(b.name) + 1
        b_map = {k[cut_b:]: v for k, v in b_in + b_out}
        cut_d = len(node.name) + 1
        for key, item in d_in + d_out:
            other = b_map.get(key[cut_d:])
            if is_tensor_item(item) and is_tensor_item(other) and item.get("data_name") and other.get("data_name"):
                pairs.append((key, os.path.join(ddir, item["data_name"]), os.path.join(bdir, other["data_name"])))
    if workers > 1 and len(pairs) > 8:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return dict(pool.map(_tensor_job, pairs, chunksize=max(1, len(pairs) // (workers * 8))))
    return dict(map(_tensor_job, pairs))


def compare_graph_pair(debug: Graph, bench: Graph, opts: Options) -> str:
    """Match and compare two built graphs in place; returns the compare mode."""
    mode_d, mode_b = detect_mode(debug), detect_mode(bench)
    if {mode_d, mode_b} == {"md5", "statistics"}:
        mode = "statistics"
    elif mode_d != mode_b:
        raise TbprobeError(f"{debug.path} and {bench.path}: the two sides were dumped with different tasks "
                           f"({debug.task} vs {bench.task}); dump both with the same task")
    else:
        mode = mode_d
    match_graphs(debug, bench, fuzzy=opts.fuzzy, align=opts.align, layer_map=opts.layer_map, manual=opts.manual)
    lookup = None
    if mode == "tensor":
        results = _tensor_results(debug, bench, opts.tensor_workers)
        lookup = results.get
    for node in debug.nodes.values():
        b = node.match
        if b is None or node.node_type == NODE_API_COLLECTION or node is debug.root:
            continue
        if node.entry is None and b.entry is None:
            continue
        res = compare_entries(node.name, node.entry, b.name, b.entry, mode, lookup)
        node.precision = res.precision
        node.input_data = res.input_text
        node.output_data = res.output_text
        node.worst_metric = res.metric
        node.inputs_ok = res.inputs_ok
    for node in debug.root.children:
        if node.node_type == NODE_API_COLLECTION and node.match is not None:
            # as the reference: the collection takes the worst of its forward calls (its backward calls are
            # the gradients of those same calls; their own results stay on them and roll up in node_ext)
            values = [c.precision for c in node.children if c.precision is not None and is_forward(c.name)]
            node.precision = max(values) if values else 0
    return mode


def process_rank(debug_dir: RankDir, bench_dir: Optional[RankDir], opts: Options) -> RankResult:
    debug = load_rank(debug_dir, "NPU")
    bench = load_rank(bench_dir, "Bench") if bench_dir is not None else None
    mode = compare_graph_pair(debug, bench, opts) if bench is not None else None
    with_md5 = (mode or detect_mode(debug)) == "md5"
    if opts.overflow_check:
        mark_overflow(debug)
    roll_up(debug)
    rows, stacks, ext, edges = graph_rows(debug, with_md5)
    findings, summary = findings_rows(debug)
    counts = _counts(debug, compare=bench is not None)
    comm = {"NPU": _comm_stubs(debug)}
    micro = debug.micro_steps
    if bench is not None:
        roll_up(bench)
        b_rows, b_stacks, b_ext, b_edges = graph_rows(bench, with_md5)
        rows += b_rows
        stacks += b_stacks
        ext += b_ext
        edges += b_edges
        comm["Bench"] = _comm_stubs(bench)
        micro = max(micro, bench.micro_steps)
    return RankResult(debug.step, debug.rank, mode, micro, rows, stacks, ext, edges, findings, comm, counts,
                      summary["first_divergence"], summary["first_overflow"], len(debug.nodes))


def _counts(graph: Graph, compare: bool) -> Dict[str, int]:
    c = {"nodes": len(graph.nodes), "matched": 0, "pass": 0, "warning": 0, "error": 0, "unmatched": 0,
         "overflow": 0}
    for node in graph.nodes.values():
        if node.overflow:
            c["overflow"] += 1
        if not compare or node is graph.root:
            continue
        if node.match is None:
            c["unmatched"] += 1
            continue
        c["matched"] += 1
        if node.precision == 1:
            c["error"] += 1
        elif node.precision == 0.5:
            c["warning"] += 1
        elif node.precision == 0:
            c["pass"] += 1
    return c
