"""The in-memory graph: one compact `Node` per dump entry or construct key, held by a `Graph` per (side, step, rank).

Nodes use __slots__ and keep the parsed dump entry as is (no copies, no strings) until rows are written."""
from typing import Dict, List, Mapping, Optional

__all__ = ["Node", "Graph", "NODE_MODULE", "NODE_API", "NODE_API_COLLECTION", "ROOT_NAME"]

NODE_MODULE = "0"
NODE_API = "1"
NODE_API_COLLECTION = "9"
ROOT_NAME = "DefaultModel"


class Node:
    __slots__ = (
        "name", "node_type", "parent", "children", "_entry", "src", "sig", "stack", "micro_step", "exec_order", "flags",
        "order", "match", "precision", "overflow", "input_data", "output_data", "distributed", "worst_metric",
        "subtree_precision", "subtree_overflow", "inputs_ok", "stack_id",
    )

    def __init__(self, name: str, node_type: str, entry: Optional[dict] = None,
                 src: Optional[Mapping[str, dict]] = None, exec_order: Optional[int] = None):
        self.name = name
        self.node_type = node_type
        self.parent: Optional["Node"] = None
        self.children: List["Node"] = []
        self._entry = entry                 # a dump entry given directly (tests, stand-ins)
        self.src = src                      # the dump's entries, decoded on access (LazyEntries)
        self.sig: Optional[tuple] = None    # (dtype, shape) of the tensor inputs, cached for matching
        self.stack: Optional[tuple] = None  # stack lines, interned by the stack reader
        self.micro_step = 0
        self.exec_order = exec_order        # position in dump.json
        self.flags: Optional[List[str]] = None
        self.order = 0                      # post-order index (node_order)
        self.match: Optional["Node"] = None
        self.precision: Optional[float] = None
        self.overflow: Optional[str] = None
        self.input_data: Optional[str] = None     # JSON text of {param_key: {field: str}} once compared
        self.output_data: Optional[str] = None
        self.stack_id = ""                        # tb_stack id, set with node.order
        self.inputs_ok = True                     # every compared input passed (for the first divergence)
        self.distributed: Optional[dict] = None
        self.worst_metric: Optional[float] = None
        self.subtree_precision: Optional[float] = None
        self.subtree_overflow: Optional[str] = None

    @property
    def entry(self) -> Optional[dict]:
        """The node's dump entry. With a lazy source every access decodes a fresh dict: read it once per pass
        and let it go, so a 100k-entry dump is never held decoded in memory."""
        if self._entry is None and self.src is not None:
            return self.src.get(self.name)
        return self._entry

    def stored_text(self) -> Optional[str]:
        """The entry's text as its source keeps it (`name": {...}`, LazyEntries.stored), else None."""
        if self._entry is None and self.src is not None:
            stored = getattr(self.src, "stored", None)
            if stored is not None:
                return stored(self.name)
        return None

    @property
    def has_entry(self) -> bool:
        return self._entry is not None or self.src is not None

    def add_flag(self, flag: str) -> None:
        if self.flags is None:
            self.flags = []
        if flag not in self.flags:
            self.flags.append(flag)

    def path(self) -> List[str]:
        """Ancestor names from the root down to this node (the matched_node_link form)."""
        out = []
        node: Optional[Node] = self
        while node is not None:
            out.append(node.name)
            node = node.parent
        out.reverse()
        return out

    def __repr__(self) -> str:
        return f"Node({self.name!r})"


class Graph:
    """One side (NPU / Bench) of one step and rank."""

    __slots__ = ("side", "step", "rank", "root", "nodes", "task", "level", "framework", "dump_data_dir",
                 "micro_steps", "edges", "path", "post", "strict_dtype")

    def __init__(self, side: str, step: int, rank: int):
        self.side = side
        self.step = step
        self.rank = rank
        self.root = Node(ROOT_NAME, NODE_MODULE)
        self.nodes: Dict[str, Node] = {ROOT_NAME: self.root}
        self.task = "statistics"
        self.level = ""
        self.framework = "pytorch"
        self.dump_data_dir: Optional[str] = None
        self.micro_steps = 1
        self.edges: Dict[str, Dict[str, str]] = {}   # consumer -> {input slot -> producer} (dataflow.json)
        self.path = ""
        self.post: Optional[List[Node]] = None   # post order, cached once the tree is final (assign_orders)
        # (debug side of a compare) every dtype difference an error, as in the reference (`--strict-dtype`); else
        # two floating-point dtypes are mixed precision, a note (compare.MSG_DTYPE_NOTE)
        self.strict_dtype = False

    @property
    def graph_id(self) -> str:
        return f"{self.side}_{self.step}_{self.rank}"

    def walk(self) -> List[Node]:
        """Nodes in post order (children before parents, siblings in order, root last), iteratively: the
        reverse of a pre-order walk that takes the last child first (one pop and one extend per node)."""
        out: List[Node] = []
        append = out.append
        stack = [self.root]
        pop = stack.pop
        extend = stack.extend
        while stack:
            node = pop()
            append(node)
            extend(node.children)
        out.reverse()
        return out
