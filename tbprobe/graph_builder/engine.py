"""One rank pair in, rows out: load -> build -> match -> compare -> overflow -> roll-up -> rows into a sink.

Rows are generated node by node and written as they come (to the output VisDbWriter, or to a temporary per-rank
database in a worker process); what a rank job returns is small (counts, findings, stand-ins of the
communication nodes for the cross-rank links).

The compare's modules (compare, match, metrics) and the process machinery are imported where they are used: a
build never loads them (start-up is a tenth of a 20k-node build)."""
import contextlib
import gc
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple

from tbprobe.errors import FormatError, TbprobeError
from tbprobe.formats.dump_dir import RankDir
from tbprobe.graph_builder.cpu_idle import cpu_times, idle_cores_since
from tbprobe.graph_builder.items import EntryError, flatten_entry, is_tensor_item
from tbprobe.graph_builder.load import detect_mode, load_rank
from tbprobe.graph_builder.model import NODE_API_COLLECTION, Graph, Node
from tbprobe.graph_builder.overflow import overflow_level
from tbprobe.graph_builder.rollup import findings_rows, roll_up
from tbprobe.graph_builder.rows import (
    assign_orders,
    edge_rows,
    ext_rows,
    node_texts,
    own_rows,
    own_texts,
    row_maker,
)
from tbprobe.graph_builder.sql_null import register_null_adapter

__all__ = ["Options", "RankSummary", "Sink", "process_rank", "compare_graph_pair", "finish_graph", "entry_error_in_file",
           "naming_files"]


@dataclass
class Options:
    overflow_check: bool = False
    fuzzy: bool = False
    align: bool = True
    layer_map: Optional[Mapping] = None
    manual: Optional[Mapping[str, str]] = None
    tensor_workers: int = 1
    split: int = 1          # >1: one rank's row work is shared with a forked helper process
    comm_stubs: bool = True  # hand back the communication nodes (only needed to link several ranks)
    split_idle: float = 0.0  # split only when at least this many cores were idle while the files were read
    strict_dtype: bool = False  # every dtype difference an error (the reference's rule); else floats: a note


@dataclass
class RankSummary:
    """What a rank job hands back (the rows themselves went to its sink)."""
    step: int
    rank: int
    mode: Optional[str]
    micro_steps: int
    comm: Dict[str, List[Node]] = field(default_factory=dict)   # side -> stand-ins of Distributed.* nodes
    counts: Dict[str, int] = field(default_factory=dict)
    first_divergence: Optional[str] = None
    first_overflow: Optional[str] = None
    first_divergence_order: Optional[int] = None   # (its exec_order: which rank's comes first in a step)
    first_overflow_order: Optional[int] = None
    rows: int = 0
    temp_db: Optional[str] = None
    levels: Tuple[str, str] = ("", "")   # (debug's, bench's): the summary notes a difference
    # the layer mapping's warnings for this pair (renames no node name holds, classes no module has); None: not
    # looked at (no bench or no mapping)
    unused_rules: Optional[Tuple[str, ...]] = None
    first_divergence_in: Optional[str] = None   # the module the first divergent operator ran in
    first_divergence_warning_only: bool = False  # chosen by rollup's warnings fallback (no error in the graph)
    first_divergence_weight: bool = False  # chosen where a weight differs, no node of the graph flagged
    # with no first overflow: the node whose inputs first hold Inf/NaN that no recorded call made (rollup)
    nonfinite_enters: Optional[str] = None
    nonfinite_enters_order: Optional[int] = None


class Sink(Protocol):
    def add_nodes(self, rows: Iterable[Sequence]) -> None: ...
    def add_stacks(self, rows: Iterable[Tuple[str, str]]) -> None: ...
    def add_node_ext(self, rows: Iterable[Sequence]) -> None: ...
    def add_edges(self, rows: Iterable[Sequence]) -> None: ...
    def add_findings(self, rows: Iterable[Sequence]) -> None: ...


def entry_error_in_file(exc: EntryError, graphs: Sequence[Optional[Graph]]) -> TbprobeError:
    """`exc` as a FormatError naming the dump.json that holds the bad entry (other errors name their file; this
    one was raised where only the entry was known). The entry is the node whose name `exc.key` starts with and
    whose entry fails again; `exc` itself when none does. The error path only: nothing is looked up otherwise."""
    for graph in graphs:
        if graph is None:
            continue
        name = exc.key
        while name:
            node = graph.nodes.get(name)
            if node is not None and node.has_entry:
                try:
                    flatten_entry(node.name, node.entry)
                except EntryError:
                    return FormatError(getattr(node.src, "path", None) or graph.path, exc.problem)
            name = name.rpartition(".")[0]
    return exc


@contextlib.contextmanager
def naming_files(*graphs: Optional[Graph]) -> Iterator[None]:
    """A bad entry found inside the block is reported with its file (entry_error_in_file)."""
    try:
        yield
    except EntryError as exc:
        raise entry_error_in_file(exc, graphs) from None


def _comm_stubs(graph: Graph) -> List[Node]:
    out = []
    for node in graph.nodes.values():
        if node.has_entry and node.name.startswith("Distributed."):
            stub = Node(node.name, node.node_type, node.entry)
            stub.exec_order = node.exec_order
            stub.precision = node.precision
            out.append(stub)
    return out


def _keep_freed_memory() -> None:
    """Tensor workers allocate and free arrays of many MB per pair; glibc hands each one back to the kernel and
    the next one page-faults its way in again (a third of the run in system time). Keep freed memory in the
    heap instead (glibc only; elsewhere nothing changes)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: big arrays from the heap, not fresh mappings
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: do not give the heap's top back after each free
    except (OSError, AttributeError):
        pass


def _one_blas_thread() -> None:
    """The tensor workers are one process per core already: BLAS's own threads (OpenBLAS starts one per core for
    each 1M-element dot product) only contend with the other workers, and their spinning and waking was a third
    of a tensor compare's CPU, in system time (512 MB: 0.7-1.0 s against 0.3-0.4 s with one thread each). Only
    takes effect before numpy is imported in the process (a worker forked from a parent without it); a setting
    the user made is kept."""
    if "numpy" not in sys.modules:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")


def _tensor_worker_init() -> None:
    _keep_freed_memory()
    _one_blas_thread()


def _tensor_job(args: Tuple[str, str, object, str, object]):
    from tbprobe.graph_builder.metrics import tensor_pair_metrics

    key, ddir, dname, bdir, bname = args
    return key, tensor_pair_metrics(ddir, dname, bdir, bname)


def _tensor_results(debug: Graph, bench: Graph, workers: int) -> Dict[str, tuple]:
    """Real-data metrics of every tensor pair, each file read once, in worker processes when allowed. A data_name
    is looked up in its rank's own tensor folder only (tensor_files.tensor_file: a name that leads out of it is
    refused, with a message in the item's row)."""
    pairs = []
    ddir = debug.dump_data_dir or ""
    bdir = bench.dump_data_dir or ""
    for node in debug.nodes.values():
        b = node.match
        if b is None or not node.has_entry or not b.has_entry:
            continue
        de, be = node.entry, b.entry
        d_in, d_out = flatten_entry(node.name, de)
        b_in, b_out = flatten_entry(b.name, be)
        cut_b = len(b.name) + 1
        b_map = {k[cut_b:]: v for k, v in b_in + b_out}
        cut_d = len(node.name) + 1
        for key, item in d_in + d_out:
            other = b_map.get(key[cut_d:])
            if is_tensor_item(item) and is_tensor_item(other) and item.get("data_name") and other.get("data_name"):
                pairs.append((key, ddir, item["data_name"], bdir, other["data_name"]))
    if workers > 1 and len(pairs) > 8:
        from tbprobe.graph_builder.workers import worker_pool

        with worker_pool(workers, _tensor_worker_init) as pool:
            return dict(pool.map(_tensor_job, pairs, chunksize=max(1, len(pairs) // (workers * 8))))
    return dict(map(_tensor_job, pairs))


def _texts(node: Node, entry: Optional[dict], with_md5: bool) -> None:
    node.input_data, node.output_data = node_texts(node, entry, with_md5)


def collection_precision(node: Node) -> float:
    """An Apis_Between_Modules collection's precision index: the worst of all its calls, backward ones too, 0
    when none was compared (as the reference's graph_visualize; it took its forward calls alone before)."""
    values = [c.precision for c in node.children if c.precision is not None]
    return max(values) if values else 0


def compare_graph_pair(debug: Graph, bench: Graph, opts: Options) -> str:
    """Match and compare two built graphs in place; returns the compare mode. Each matched pair's entries are
    decoded once here: the debug node gets its compared data (and overflow level with -oc), the bench node its
    plain data, both as the JSON text of their rows."""
    with naming_files(debug, bench):
        return _compare_graph_pair(debug, bench, opts)


def _compare_graph_pair(debug: Graph, bench: Graph, opts: Options) -> str:
    from tbprobe.graph_builder.compare import compare_entries

    mode, lookup = _prepare(debug, bench, opts)
    with_md5 = mode == "md5"
    for node in debug.nodes.values():
        b = node.match
        if b is None or node.node_type == NODE_API_COLLECTION or node is debug.root:
            continue
        if not node.has_entry and not b.has_entry:
            continue
        de = node.entry
        be = b.entry
        res = compare_entries(node.name, de, b.name, be, mode, lookup, strict_dtype=opts.strict_dtype)
        node.precision = res.precision
        node.input_data = res.input_text
        node.output_data = res.output_text
        node.worst_metric = res.metric
        node.inputs_ok = res.inputs_ok
        if opts.overflow_check and de:
            node.overflow = overflow_level(node.name, de)
        if be is not None:
            _texts(b, be, with_md5)
            if opts.overflow_check:
                b.overflow = overflow_level(b.name, be)
    for node in debug.root.children:
        if node.node_type == NODE_API_COLLECTION and node.match is not None:
            node.precision = collection_precision(node)
    return mode


def finish_graph(graph: Graph, with_md5: bool, overflow_check: bool) -> None:
    """Row data (and overflow levels) of every node the compare did not already cover, one decode each."""
    with naming_files(graph):
        _finish_graph(graph, with_md5, overflow_check)


def _finish_graph(graph: Graph, with_md5: bool, overflow_check: bool) -> None:
    for node in graph.nodes.values():
        if node.input_data is not None or not node.has_entry:
            continue
        entry = node.entry
        _texts(node, entry, with_md5)
        if overflow_check and entry and node.node_type != NODE_API_COLLECTION:
            node.overflow = overflow_level(node.name, entry)


def _prepare(debug: Graph, bench: Graph, opts: Options):
    """Mode, matching and (tensor mode) the metrics of every tensor pair; returns (mode, lookup)."""
    from tbprobe.graph_builder.match import match_graphs

    mode_d, mode_b = detect_mode(debug), detect_mode(bench)
    if {mode_d, mode_b} == {"md5", "statistics"}:
        mode = "statistics"
    elif mode_d != mode_b:
        raise TbprobeError(f"{debug.path} and {bench.path}: the two sides were dumped with different tasks "
                           f"({debug.task} vs {bench.task}); dump both with the same task")
    else:
        mode = mode_d
    if {debug.level, bench.level} == {"L0", "L1"}:
        # (modules on one side, operators on the other: not one node could match, and "first divergent node:
        # none" read as a clean compare)
        raise TbprobeError(f"{debug.path} and {bench.path}: the two sides were dumped at levels {debug.level} and "
                           f"{bench.level}, which share no node; dump both at the same level (or one at mix)")
    match_graphs(debug, bench, fuzzy=opts.fuzzy, align=opts.align, layer_map=opts.layer_map, manual=opts.manual)
    debug.strict_dtype = opts.strict_dtype   # (the first divergence's input tests grade as the compare did)
    lookup = _tensor_results(debug, bench, opts.tensor_workers).get if mode == "tensor" else None
    return mode, lookup


def _rows(debug: Graph, bench: Optional[Graph], mode: Optional[str], lookup, opts: Options, with_md5: bool,
          d_nodes: List[Node], b_nodes: List[Node]) -> Iterator[list]:
    """tb_nodes rows, generated node by node: each entry is decoded, compared and turned into text once, and
    nothing of it is kept but the node's precision, overflow and metric. `d_nodes`: debug nodes (a matched one
    also emits its bench twin's row); `b_nodes`: the other bench nodes."""
    if bench is None and not opts.overflow_check:  # a plain build: every row from the node's own entry
        yield from own_rows(debug, d_nodes, with_md5)
        return
    if bench is not None:
        from tbprobe.graph_builder.compare import compare_entries
    d_row = row_maker(debug)
    b_row = row_maker(bench) if bench is not None else None
    for node in d_nodes:
        b = node.match
        if b is not None and _compared(node, bench, debug):  # (a build has no matches: no call per node)
            entry = node.entry if node.has_entry else None
            be = b.entry if b.has_entry else None
            res = compare_entries(node.name, entry, b.name, be, mode or "statistics", lookup, bench_texts=True,
                                  strict_dtype=opts.strict_dtype)
            node.precision = res.precision
            node.worst_metric = res.metric
            node.inputs_ok = res.inputs_ok
            if opts.overflow_check and entry:
                node.overflow = overflow_level(node.name, entry)
            if opts.overflow_check and be:
                b.overflow = overflow_level(b.name, be)
            yield d_row(node, res.input_text, res.output_text)
            yield b_row(b, *(res.bench_texts or node_texts(b, be, with_md5)))  # type: ignore[misc]
            continue
        if node.node_type == NODE_API_COLLECTION and b is not None and bench is not None:
            node.precision = collection_precision(node)
        yield d_row(node, *_uncompared_texts(node, opts.overflow_check, with_md5))
    for b in b_nodes:
        yield b_row(b, *_uncompared_texts(b, opts.overflow_check, with_md5))  # type: ignore[misc]


def _uncompared_texts(node: Node, overflow_check: bool, with_md5: bool):
    """A node's own row texts (no compare), and with -oc its overflow level, from one decode of its entry."""
    if overflow_check and node.node_type != NODE_API_COLLECTION and node.has_entry:
        entry = node.entry  # decoded once for both
        if entry:
            node.overflow = overflow_level(node.name, entry)
        return node_texts(node, entry, with_md5)
    return own_texts(node, with_md5)


def _compared(node: Node, bench: Optional[Graph], debug: Graph) -> bool:
    b = node.match
    return bench is not None and b is not None and node is not debug.root and \
        node.node_type != NODE_API_COLLECTION and (node.has_entry or b.has_entry)


SPLIT_MIN_NODES = 4000             # below this, sharing a rank's work with a helper process does not pay
# a build's rows are light: its helper (fork, pool, temporary database, copy into an indexed table) lost
# 0.2-0.3 s at 20k nodes (1.16-1.28 s against 0.96-1.02 s) and won 0.5-1.4 s at 100k
BUILD_SPLIT_MIN_NODES = 40000
_FORK_JOB: Optional[tuple] = None   # what a forked helper inherits (graphs are not pickled, they are shared)


def _helper_rows(temp_db: str) -> Dict[str, tuple]:
    """In a forked helper: write this half's rows into `temp_db`; return the results the parent needs."""
    from tbprobe.graph_builder.temp_db import RankDb

    debug, bench, mode, lookup, opts, with_md5, d_nodes, b_nodes, early = _FORK_JOB  # type: ignore[misc]
    sink = RankDb(temp_db)
    try:
        sink.add_nodes(_rows(debug, bench, mode, lookup, opts, with_md5, d_nodes, b_nodes))
        sink.add_node_ext([row for graph in early for row in ext_rows(graph)])
    except TbprobeError as exc:  # back as text: FormatError does not survive unpickling
        sink.conn.close()
        if isinstance(exc, EntryError):
            exc = entry_error_in_file(exc, (debug, bench))
        return str(exc)  # type: ignore[return-value]
    sink.close()
    return {n.name: (n.precision, n.overflow, n.worst_metric, n.inputs_ok) for n in d_nodes}


PARENT_SHARE = 0.47   # of the rows, when a helper shares the work
BUILD_PARENT_SHARE = 0.55
_BLOCK = 256          # nodes dealt out together


def _deal(nodes: List[Node], share: float) -> Tuple[List[Node], List[Node]]:
    """Blocks of `nodes` dealt out in turn so that the first list gets `share` of them."""
    mine: List[Node] = []
    theirs: List[Node] = []
    for k in range(0, len(nodes), _BLOCK):
        block = nodes[k:k + _BLOCK]
        if len(mine) < share * (len(mine) + len(theirs) + len(block)):
            mine.extend(block)
        else:
            theirs.extend(block)
    return mine, theirs


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def _write_rows(debug: Graph, bench: Optional[Graph], mode, lookup, opts: Options, with_md5: bool,
                sink: "Sink", early: List[Graph]) -> int:
    """All tb_nodes rows into `sink`, and the tbprobe_node_ext rows of the `early` graphs (those whose roll-up
    does not depend on the rows: done already); with `opts.split` > 1 and a big graph, half of the work runs in
    a forked helper process that writes a temporary database, copied in afterwards."""
    global _FORK_JOB
    post = debug.post or debug.walk()
    late = [n for n in post if n.node_type == NODE_API_COLLECTION or n is debug.root]
    regular = [n for n in post if not (n.node_type == NODE_API_COLLECTION or n is debug.root)]
    b_rest: List[Node] = []
    if bench is not None:
        covered = {id(n.match) for n in regular if _compared(n, bench, debug)}
        b_rest = [b for b in (bench.post or bench.walk()) if id(b) not in covered]
    total = len(regular) + len(b_rest) + len(late)
    least = SPLIT_MIN_NODES if bench is not None else max(SPLIT_MIN_NODES, BUILD_SPLIT_MIN_NODES)
    if opts.split > 1 and len(regular) > least and _can_fork():
        import tempfile

        # about half each: the parent also indexes its rows while the helper finishes (it copies the helper's
        # rows in only once the helper is done, so a smaller share would only make it wait), the helper also
        # writes the early node_ext rows (in a build, with its light rows, 55 % to the parent balances them); both
        # get blocks from all over the graph (forward and backward entries do not cost the same)
        share = PARENT_SHARE if bench is not None or debug not in early else BUILD_PARENT_SHARE
        mine_d, theirs_d = _deal(regular, share)
        mine_b, theirs_b = _deal(b_rest, share)
        from tbprobe.graph_builder.workers import ForkedHelper

        _FORK_JOB = (debug, bench, mode, lookup, opts, with_md5, theirs_d, theirs_b, early)
        tmp_name = None
        helper = None
        try:
            # (made inside the try: a signal right after it still removes it)
            fd, tmp_name = tempfile.mkstemp(suffix=".db")
            os.close(fd)
            # a quiet child (workers.py): a signal is the parent's to handle, and the finally below kills the
            # helper before its file goes
            helper = ForkedHelper(_helper_rows, tmp_name)
            helper.start()
            sink.add_nodes(_rows(debug, bench, mode, lookup, opts, with_md5, mine_d, mine_b))
            # index the rows so far while the helper finishes: the copy then updates the indexes as it goes
            # (at 100k: about 1 s here while the helper works, + about 0.4 s in the copy, against 2.6 s)
            create_indexes = getattr(sink, "create_indexes", None)
            if create_indexes is not None:
                create_indexes()
            states = helper.result()
            helper.stop()
            if isinstance(states, str):
                raise TbprobeError(states)
            for node in theirs_d:
                node.precision, node.overflow, node.worst_metric, node.inputs_ok = states[node.name]
            from tbprobe.graph_builder.temp_db import copy_nodes
            copy_nodes(tmp_name, sink, with_ext=True)
        finally:
            _FORK_JOB = None
            if helper is not None:
                helper.stop()
            if tmp_name is not None:
                os.unlink(tmp_name)
        sink.add_nodes(_rows(debug, bench, mode, lookup, opts, with_md5, late, []))
        return total
    sink.add_nodes(_rows(debug, bench, mode, lookup, opts, with_md5, regular + late, b_rest))
    sink.add_node_ext([row for graph in early for row in ext_rows(graph)])
    return total


def process_rank(debug_dir: RankDir, bench_dir: Optional[RankDir], opts: Options, sink: Sink) -> RankSummary:
    """Load, build, match, compare one step x rank and write its rows into `sink` (a VisDbWriter or a
    temporary per-rank database)."""
    # No cyclic GC while a rank is processed: the graphs (100k+ nodes) live until the end, and everything else
    # made on the way (decoded entries, texts, rows) is acyclic and freed by reference counting; a collector
    # walking the growing graphs again and again costs about a tenth of the run. The graphs are frozen before
    # the row work so that the collection at the end does not walk them either.
    register_null_adapter()
    was_enabled = gc.isenabled()
    gc.disable()
    start = cpu_times() if opts.split > 1 and opts.split_idle > 0 else None
    try:
        debug = load_rank(debug_dir, "NPU")
        bench = load_rank(bench_dir, "Bench") if bench_dir is not None else None
        if start is not None:
            idle = idle_cores_since(start)
            if idle is not None and idle < opts.split_idle:
                opts = replace(opts, split=1)  # no core to spare: a helper would only add its own costs
        gc.freeze()
        try:
            with naming_files(debug, bench):
                return _process_graphs(debug, bench, opts, sink)
        finally:
            gc.unfreeze()
    finally:
        if was_enabled:
            gc.enable()


def _process_graphs(debug: Graph, bench: Optional[Graph], opts: Options, sink: Sink) -> RankSummary:
    mode, lookup = _prepare(debug, bench, opts) if bench is not None else (None, None)
    with_md5 = (mode or detect_mode(debug)) == "md5"
    _, d_stacks = assign_orders(debug)
    stacks = list(d_stacks)
    if bench is not None:
        _, b_stacks = assign_orders(bench)
        stacks += b_stacks
    # Roll-ups that do not depend on the compare (the bench side's: results live on the debug side; a build's
    # without -oc) are done now, so their tbprobe_node_ext rows can be written with the node rows (by the helper
    # when there is one) instead of after them.
    early = [bench] if bench is not None else ([] if opts.overflow_check else [debug])
    for graph in early:
        roll_up(graph)
    n_rows = _write_rows(debug, bench, mode, lookup, opts, with_md5, sink, early)
    sink.add_stacks(stacks)
    if debug not in early:
        roll_up(debug)
        sink.add_node_ext(ext_rows(debug))
    edges = edge_rows(debug)
    micro = debug.micro_steps
    # a stand-in decodes its node's entry: skip them when there is no other rank to link with
    comm = {"NPU": _comm_stubs(debug)} if opts.comm_stubs else {}
    if bench is not None:
        micro = max(micro, bench.micro_steps)
        if opts.comm_stubs:
            comm["Bench"] = _comm_stubs(bench)
    if edges:
        sink.add_edges(edges)
    findings, summary = findings_rows(debug, mode)
    if findings:
        sink.add_findings(findings)
    summary_levels = (debug.level, bench.level if bench is not None else debug.level)
    unused: Optional[Tuple[str, ...]] = None
    if bench is not None and opts.layer_map:
        from tbprobe.graph_builder.match import unused_mapping_rules

        unused = tuple(unused_mapping_rules(opts.layer_map, debug, bench))
    return RankSummary(debug.step, debug.rank, mode, micro, comm, _counts(debug, bench),
                       summary["first_divergence"], summary["first_overflow"],  # type: ignore[arg-type]
                       summary["first_divergence_order"], summary["first_overflow_order"],  # type: ignore[arg-type]
                       n_rows, levels=summary_levels, unused_rules=unused,
                       first_divergence_in=summary.get("first_divergence_in"),  # type: ignore[arg-type]
                       first_divergence_warning_only=bool(summary.get("first_divergence_warning_only")),
                       first_divergence_weight=bool(summary.get("first_divergence_weight")),
                       nonfinite_enters=summary.get("nonfinite_enters"),  # type: ignore[arg-type]
                       nonfinite_enters_order=summary.get("nonfinite_enters_order"))  # type: ignore[arg-type]


def _counts(graph: Graph, bench: Optional[Graph]) -> Dict[str, int]:
    compare = bench is not None
    c = {"nodes": len(graph.nodes), "matched": 0, "pass": 0, "warning": 0, "error": 0, "unmatched": 0,
         "bench_unmatched": 0, "overflow": 0}
    if bench is not None:
        # the bench's own extra calls: counted on the debug side alone, a bench that did more looked all matched
        c["bench_unmatched"] = sum(1 for n in bench.nodes.values() if n.match is None and n is not bench.root)
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
