"""Dump entries + construct.json + stack.json -> one hierarchical `Graph` (REFERENCE.md section 3).

Differences from the reference, on purpose: a subtree whose parent never appears keeps its place under a stand-in
parent (flagged "missing_parent") instead of vanishing, and recomputed layers are re-attached."""
import re
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tbprobe.graph_builder.model import NODE_API, NODE_API_COLLECTION, NODE_MODULE, Graph, Node

__all__ = ["build_graph", "node_type_of", "forward_twin", "is_backward", "is_forward"]

_MODULE_PREFIXES = ("Module.", "Cell.")
_API_COUNTER = re.compile(r"^(.*)\.(\d+)\.(forward|backward)$")
_MODULE_CALL = re.compile(r"^(.*)\.(forward|backward)\.(\d+)$")


# the collectors' pseudo parents of the optimizer's and gradient clipping's calls: module nodes, as in the
# reference's graph (they were API nodes, and two of them in a row went under an Apis_Between_Modules of their own)
_PSEUDO_PARENTS = ("optimizer", "clip_grad")


def node_type_of(name: str) -> str:
    if name.startswith(_MODULE_PREFIXES) or ".parameters_grad" in name or name in _PSEUDO_PARENTS:
        return NODE_MODULE
    if name.startswith("Apis_Between_Modules"):
        return NODE_API_COLLECTION
    return NODE_API


def is_backward(name: str) -> bool:
    return name.endswith(".backward") or ".backward." in name


def is_forward(name: str) -> bool:
    return name.endswith(".forward") or ".forward." in name


def forward_twin(name: str) -> Optional[str]:
    """`X.backward.k` -> `X.forward.k` (modules), `api.k.backward` -> `api.k.forward` (APIs)."""
    m = _MODULE_CALL.match(name)
    if m and m.group(2) == "backward":
        return f"{m.group(1)}.forward.{m.group(3)}"
    m = _API_COUNTER.match(name)
    if m and m.group(3) == "backward":
        return f"{m.group(1)}.{m.group(2)}.forward"
    return None


def _to_backward(name: str) -> Optional[str]:
    m = _MODULE_CALL.match(name)
    if m and m.group(2) == "forward":
        return f"{m.group(1)}.backward.{m.group(3)}"
    m = _API_COUNTER.match(name)
    if m and m.group(3) == "forward":
        return f"{m.group(1)}.{m.group(2)}.backward"
    return None


def _inplace_parent(name: str, parent: str, parents: Mapping[str, Optional[str]]) -> Optional[str]:
    """The parent a module backward call `X.<attr>.<Class>.backward.k` should have when its recorded parent is
    not the module `X` itself (`X.<Class>.backward.j`): the backward twin of its forward twin's parent (None,
    the root, when that forward call had no parent), as long as that node exists; else the recorded parent."""
    m = _MODULE_CALL.match(name)
    if not m or m.group(2) != "backward":
        return parent
    parts = name.split(".")
    up_parts = parent.split(".")
    if len(parts) < 5 or len(up_parts) < 4 or parts[:-4] == up_parts[:-3]:
        return parent
    twin = f"{m.group(1)}.forward.{m.group(3)}"
    if twin not in parents:
        return parent
    forward_parent = parents.get(twin)
    if not forward_parent:
        return None
    p = _MODULE_CALL.match(forward_parent)
    if not p or p.group(2) != "forward":
        return parent
    candidate = f"{p.group(1)}.backward.{p.group(3)}"
    return candidate if candidate in parents else parent


def build_graph(side: str, step: int, rank: int, entries: Mapping[str, dict],
                parents: Mapping[str, Optional[str]], stacks_by_name: Optional[Mapping[str, Sequence[str]]] = None,
                micro_steps: Optional[Mapping[str, int]] = None) -> Graph:
    """Build the tree. `entries` are dump.json entries in file order, `parents` construct.json in order,
    `stacks_by_name` name -> stack lines, `micro_steps` Megatron's explicit micro step per node."""
    graph = Graph(side, step, rank)
    nodes = graph.nodes
    # exec_pos holds exactly the entries' names: its lookups stand for `in entries` (a LazyEntries' own
    # __contains__ is a Python call per name)
    exec_pos = {name: i for i, name in enumerate(entries)}

    # 1. one node per construct key, then per dump entry not in construct (L1 dumps, parameters_grad)
    order: List[str] = list(parents)
    order.extend([name for name in exec_pos if name not in parents])
    exec_get = exec_pos.get
    module_prefixes = _MODULE_PREFIXES
    for name in order:
        if name not in nodes:
            pos = exec_get(name)
            # node_type_of(name), without a call per node
            if name.startswith(module_prefixes) or ".parameters_grad" in name or name in _PSEUDO_PARENTS:
                node_type = NODE_MODULE
            elif name.startswith("Apis_Between_Modules"):
                node_type = NODE_API_COLLECTION
            else:
                node_type = NODE_API
            # the entry is decoded when used, not now
            nodes[name] = Node(name, node_type, None, None if pos is None else entries, pos)

    parents_get = parents.get
    parent_of: Dict[str, Optional[str]] = {name: parents_get(name) or None for name in order}

    # 2. a module's backward call recorded under a module that cannot hold it (in-place modules such as
    # ReLU(inplace=True) fire no backward hook, so the calls after them land under them) takes the backward
    # twin of its forward twin's parent; then backward nodes with no parent take the same
    for name, parent in parent_of.items():
        if parent is not None and ".backward." in name:
            fixed = _inplace_parent(name, parent, parents)
            if fixed is not parent:
                parent_of[name] = fixed
    for name, parent in parent_of.items():
        if parent is None and (name.endswith(".backward") or ".backward." in name):
            twin = forward_twin(name)
            twin_parent = parent_of.get(twin) if twin else None
            if twin_parent:
                candidate = _to_backward(twin_parent)
                if candidate and candidate in nodes:
                    parent_of[name] = candidate

    # 4. parameters_grad under the last backward call of their module (the highest number: a module called twice,
    # a tied embedding, completes backward.1 first), as the reference places them. One whose module has no
    # backward call stays at the top level, where the reference drops it.
    grads = [n for n in order if ".parameters_grad" in n]
    if grads:
        last_call: Dict[str, Tuple[int, str]] = {}
        for name in nodes:
            m = _MODULE_CALL.match(name)
            if m and m.group(2) == "backward":
                n = int(m.group(3))
                if n >= last_call.get(m.group(1), (-1, ""))[0]:
                    last_call[m.group(1)] = (n, name)
        for name in grads:
            if parent_of.get(name):
                continue
            last = last_call.get(name.split(".parameters_grad")[0])
            if last is not None:
                parent_of[name] = last[1]

    # 3. stand-ins for parents that never appear, so their subtrees are kept
    for name in list(parent_of):
        parent = parent_of[name]
        if parent is not None and parent not in nodes:
            stand_in = Node(parent, node_type_of(parent))
            stand_in.add_flag("missing_parent")
            nodes[parent] = stand_in
            parent_of[parent] = None
            order.insert(order.index(name), parent)

    # attach in construct order, guarding against cycles
    root = graph.root
    nodes_get = nodes.get
    tops = _Tops()
    for name in order:
        node = nodes[name]
        if node.parent is not None or node is root:
            continue
        parent_name = parent_of[name]
        parent = nodes_get(parent_name) if parent_name else root
        if parent is None or (parent is not root and tops.top(parent) is node):
            parent = root
            node.add_flag("cycle_broken")
        tops.join(node, parent)
        node.parent = parent
        parent.children.append(node)

    _reattach_recomputed(graph)
    _group_top_level_apis(graph)
    _assign_micro_steps(graph, micro_steps)
    if stacks_by_name:
        _assign_stacks(graph, stacks_by_name)
    return graph


def _reattach_recomputed(graph: Graph) -> None:
    """Activation checkpointing re-runs a layer's forward at the top level right before that layer's backward:
    `X.forward.k` (k >= 1) directly followed by a top-level `X.backward.j` with j < k goes under that backward
    call."""
    root = graph.root
    modules = [c for c in root.children if c.node_type == NODE_MODULE]
    moved = set()
    for i, node in enumerate(modules[:-1]):
        m = _MODULE_CALL.match(node.name)
        if not m or m.group(2) != "forward" or m.group(3) == "0":
            continue
        nxt = modules[i + 1]
        n = _MODULE_CALL.match(nxt.name)
        # the backward belongs to an earlier call (j < k): a re-run, not the next micro step's own call
        if n and n.group(2) == "backward" and n.group(1) == m.group(1) and int(n.group(3)) < int(m.group(3)):
            node.parent = nxt
            nxt.children.insert(0, node)
            node.add_flag("recomputed")
            moved.add(id(node))
    if moved:
        root.children = [c for c in root.children if id(c) not in moved]


class _Tops:
    """The top of each attached subtree, found with path compression: attaching `node` under `parent` makes a
    cycle exactly when `parent`'s top is `node` (an unattached node is its subtree's top). Walking the parents
    on each attach instead was quadratic: a construct.json chain 100,000 levels deep built for minutes."""

    def __init__(self) -> None:
        self._up: Dict[int, Node] = {}

    def top(self, node: Node) -> Node:
        up = self._up
        path = []
        while True:
            nxt = up.get(id(node))
            if nxt is None:
                nxt = node.parent
            if nxt is None:
                break
            path.append(node)
            node = nxt
        for seen in path:
            up[id(seen)] = node
        return node

    def join(self, node: Node, parent: Node) -> None:
        self._up[id(node)] = self.top(parent)


def _group_top_level_apis(graph: Graph) -> None:
    """Runs of two or more consecutive top-level APIs go under `Apis_Between_Modules.<n>` (type 9)."""
    root = graph.root
    new_children: List[Node] = []
    run: List[Node] = []
    counter = 0

    def flush() -> None:
        nonlocal counter
        if len(run) >= 2:
            name = f"Apis_Between_Modules.{counter}"
            counter += 1
            group = Node(name, NODE_API_COLLECTION)
            group.parent = root
            for child in run:
                child.parent = group
            group.children = list(run)
            graph.nodes[name] = group
            new_children.append(group)
        else:
            new_children.extend(run)
        run.clear()

    for child in root.children:
        if child.node_type == NODE_API:
            run.append(child)
        else:
            flush()
            new_children.append(child)
    flush()
    root.children = new_children


def _assign_micro_steps(graph: Graph, explicit: Optional[Mapping[str, int]]) -> None:
    """Megatron's explicit ids when given; else a new micro step starts at the first top-level forward
    module that follows a backward module."""
    current = 0
    seen_backward = False
    for child in graph.root.children:
        if explicit:
            step = explicit.get(child.name)
            if step is None:
                step = _first_explicit(child, explicit, current)
            current = step
        else:
            if child.node_type == NODE_MODULE and is_forward(child.name) and seen_backward:
                current += 1
                seen_backward = False
            if child.node_type == NODE_MODULE and is_backward(child.name):
                seen_backward = True
        _set_micro(child, current, explicit)
    graph.micro_steps = current + 1 if graph.root.children else 1


def _first_explicit(node: Node, explicit: Mapping[str, int], default: int) -> int:
    stack = [node]
    while stack:
        probe = stack.pop()
        if probe.name in explicit:
            return explicit[probe.name]
        stack.extend(probe.children)
    return default


def _set_micro(node: Node, value: int, explicit: Optional[Mapping[str, int]]) -> None:
    stack = [node]
    while stack:
        probe = stack.pop()
        probe.micro_step = explicit.get(probe.name, value) if explicit else value
        stack.extend(probe.children)


def _assign_stacks(graph: Graph, stacks_by_name: Mapping[str, Sequence[str]]) -> None:
    """Each node gets its stack; backward nodes have none of their own and take their forward twin's."""
    get = stacks_by_name.get
    api_counter = _API_COUNTER.match
    for name, node in graph.nodes.items():
        lines = get(name)
        if lines is None:
            if name.endswith(".backward"):
                # forward_twin's result for such a name, without its module pattern (which needs digits last)
                if api_counter(name):
                    lines = get(name[:-8] + "forward")
            elif ".backward." in name:
                twin = forward_twin(name)
                if twin:
                    lines = get(twin)
        if lines is not None:
            node.stack = tuple(lines)


def iter_names(graph: Graph) -> Iterable[str]:
    return (n.name for n in graph.walk())
