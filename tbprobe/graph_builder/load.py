"""One rank folder -> one built `Graph`, through tbprobe.formats (the only code here that touches files)."""
from pathlib import Path

from tbprobe.errors import FormatError
from tbprobe.formats._io import read_json
from tbprobe.formats.construct_json import load_construct
from tbprobe.formats.dump_dir import RankDir
from tbprobe.formats.dump_json import load_dump
from tbprobe.formats.stack_json import load_stack
from tbprobe.graph_builder.build import build_graph
from tbprobe.graph_builder.items import is_tensor_item
from tbprobe.graph_builder.model import Graph

__all__ = ["load_rank", "detect_mode", "DATAFLOW_JSON"]

DATAFLOW_JSON = "dataflow.json"


def _load_dataflow(path: Path) -> dict:
    doc = read_json(path, "dataflow.json")   # (one line for any bad JSON, a number too long included)
    # every producer a record name (a list there stopped the build with a traceback, a null made an edge from
    # "None")
    if not isinstance(doc, dict) or not all(isinstance(v, dict) and all(isinstance(p, str) for p in v.values())
                                            for v in doc.values()):
        raise FormatError(path, "expected {consumer: {input_slot: producer}}, each producer a record name")
    return doc


def load_rank(rank_dir: RankDir, side: str = "NPU") -> Graph:
    dump = load_dump(rank_dir.dump_json)
    parents, micro = {}, None
    if rank_dir.construct_json is not None:
        construct = load_construct(rank_dir.construct_json)
        parents = construct.parents
        micro = construct.micro_steps or None
    stacks_by_name = None
    if rank_dir.stack_json is not None:
        stacks = load_stack(rank_dir.stack_json)
        stacks_by_name = {name: stacks.stacks[i] for name, i in stacks.by_name.items()}
    graph = build_graph(side, rank_dir.step, rank_dir.rank, dump.entries, parents, stacks_by_name, micro)
    graph.task = dump.task or "statistics"
    graph.level = dump.level or ""
    graph.framework = dump.framework or "pytorch"
    graph.path = str(rank_dir.path)
    if dump.task == "tensor":
        graph.dump_data_dir = _tensor_dir(rank_dir)
    flow = rank_dir.path / DATAFLOW_JSON
    if flow.is_file():
        graph.edges = _load_dataflow(flow)
    return graph


def _tensor_dir(rank_dir: RankDir) -> str:
    """The rank folder's own dump_tensor_data, whatever the dump records: msprobe and the collector both write the
    tensors there and record that folder's absolute path on the dumping machine, which is stale once the dump
    moves; a recorded folder was used before when it existed here, so a dump.json could point the compare at
    any folder of the machine (`"dump_data_dir": "/"`, with data_names relative to it)."""
    return str(rank_dir.path / "dump_tensor_data")


def detect_mode(graph: Graph) -> str:
    """tensor task -> tensor; structure task -> structure; checksums in the items -> md5; else statistics."""
    if graph.task == "tensor":
        return "tensor"
    if graph.task == "structure":
        return "structure"
    seen = 0
    for node in graph.nodes.values():
        entry = node.entry
        if not entry:
            continue
        for key in ("input_args", "output", "input"):
            for item in entry.get(key) or ():
                if isinstance(item, dict) and is_tensor_item(item):
                    return "md5" if "md5" in item else "statistics"
        seen += 1
        if seen > 50:
            break
    return "statistics"
