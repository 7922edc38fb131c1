"""Pairing debug nodes with bench nodes.

Order of the passes (each only looks at nodes still unmatched):
0. (with the aligner, under a pair whose child lists differ) the children aligned by structure and order
   (align.py): a diff of (name without counters, direction, input shapes), a group of top-level calls keyed
   by the calls it holds; pairs whose names and keys agree are kept unless following a shift pairs more;
1. exact: same name under matched parents (= same name and same ancestor names), from the roots down; with the
   aligner, groups of top-level calls only where at least half their calls are the same ones;
2. layer mapping (`-lm`): module names rewritten by the YAML's per-class renames, then matched by name;
3. fuzzy (`-fm`): modules by name; APIs by (API name without counter, direction, occurrence within parent);
4. structural aligner (on by default): the unmatched children of each matched pair are aligned as sequences of
   (API or module name without counters, direction, input shapes and dtypes), so one extra or missing call
   leaves only itself unmatched;
5. (with the aligner) an operator's backward record pairs with its forward twin's backward;
6. manual matches (`.vis.config`), which override the rest.
"""
from typing import Dict, List, Mapping, Optional, Tuple

from tbprobe.graph_builder.align import (
    MODULE_NAME,
    align_children,
    link,
    same_inputs,
    signature,
    similar_groups,
    strip_counters,
)
from tbprobe.graph_builder.diff import diff_pairs
from tbprobe.graph_builder.model import Graph, Node

__all__ = ["match_graphs", "signature", "strip_counters", "mapping_rules", "unused_mapping_rules"]

def match_graphs(debug: Graph, bench: Graph, *, fuzzy: bool = False, align: bool = True,
                 layer_map: Optional[Mapping[str, Mapping[str, str]]] = None,
                 manual: Optional[Mapping[str, str]] = None) -> int:
    """Set `.match` on both sides; returns the number of matched debug nodes."""
    link(debug.root, bench.root)
    pairs = [(debug.root, bench.root)]
    while pairs:
        d, b = pairs.pop()
        by_name = {c.name: c for c in b.children}
        # identical child lists cannot hide a shifted counter: pair them by name without looking inside
        same_list = len(d.children) == len(b.children) and all(
            x.name == y.name for x, y in zip(d.children, b.children))
        if align and not same_list:
            # the lists differ, so a counter may be shifted by an extra call: structure and order first
            align_children(d.children, b.children)
        for child in d.children:
            twin = by_name.get(child.name)
            if twin is not None and twin.match is None and child.match is None:
                # with the aligner on, a same-named pair whose inputs differ in shape is left to it: an extra
                # call shifts the counters, so the name may belong to a different call; a group of top-level
                # calls pairs by its number only where its calls are mostly the same ones
                if not align or same_list or (same_inputs(child, twin) and similar_groups(child, twin)):
                    link(child, twin)
        if layer_map is not None:
            _match_mapped(d, b, layer_map)
        if fuzzy:
            _match_fuzzy(d, b)
        if align:
            _align(d, b)
        for child in d.children:
            if child.match is not None and child.match.parent is b:
                pairs.append((child, child.match))
    _match_moved(debug, bench)
    if align:
        _backward_follows_forward(debug, bench)
    if manual:
        _apply_manual(debug, bench, manual)
    return sum(1 for n in debug.nodes.values() if n.match is not None)


def _match_moved(debug: Graph, bench: Graph) -> None:
    """Pair same-named nodes that the walk above never met because they hang at a different depth: one side's
    node sits somewhere under the counterpart of the other's nearest matched ancestor. msprobe hangs the backward
    calls inside a module called with keyword arguments only (HuggingFace's attention layers) under that module's
    parent, where tbprobe keeps them under the module (docs/compatibility.md). Names carry their call counters, so
    a name is one call on each side."""
    for name, d in debug.nodes.items():
        if d.match is not None:
            continue
        b = bench.nodes.get(name)
        if b is None or b.match is not None or b.parent is None or d.parent is None:
            continue
        # under parents of one name the walk met both and left them apart on purpose (the aligner's shifted counters)
        if d.parent.name == b.parent.name or not same_inputs(d, b):
            continue
        if _under_counterpart(d, b) or _under_counterpart(b, d):
            link(d, b)


def _backward_follows_forward(debug: Graph, bench: Graph) -> None:
    """An operator's backward record pairs with the backward of its forward's twin. The exact pass pairs backward
    records by name where their inputs (the output gradients) have one shape, before the aligner pairs the
    forwards around an extra call: with one extra `add` in the debug run, its backward took the bench's
    residual add's (a false error, named the first divergence) and the debug residual add's stayed unmatched."""
    for name, d in debug.nodes.items():
        if not name.endswith(".backward") or name.startswith(("Module.", "Cell.")):
            continue
        d_fw = debug.nodes.get(name[:-len("backward")] + "forward")
        if d_fw is None:
            continue
        if d_fw.match is None:
            # an extra call: its backward keeps no bench record whose forward has a twin of its own
            twin = d.match
            if twin is not None:
                b_fw = bench.nodes.get(twin.name[:-len("backward")] + "forward")
                if b_fw is not None and b_fw.match is not None:
                    _unlink(d)
            continue
        want = bench.nodes.get(d_fw.match.name[:-len("forward")] + "backward") if \
            d_fw.match.name.endswith(".forward") else None
        if want is None or d.match is want:
            continue
        _unlink(d)
        _unlink(want)
        link(d, want, "aligned")


def _unlink(n: Node) -> None:
    if n.match is not None:
        n.match.match = None
        n.match = None


def _under_counterpart(a: Node, other: Node) -> bool:
    """Whether `other` lies under the counterpart of `a`'s nearest matched ancestor."""
    up = a.parent
    while up is not None and up.match is None:
        up = up.parent
    if up is None:
        return False
    target = up.match
    node = other.parent
    while node is not None:
        if node is target:
            return True
        node = node.parent
    return False


def _match_fuzzy(d: Node, b: Node) -> None:
    def keyed(children: List[Node]) -> Dict[tuple, Node]:
        seen: Dict[tuple, int] = {}
        out: Dict[tuple, Node] = {}
        for c in children:
            if c.match is not None:
                continue
            base, direction = strip_counters(c.name)
            k = (base, direction)
            i = seen.get(k, 0)
            seen[k] = i + 1
            out[(base, direction, i)] = c
        return out

    bench_keys = keyed(b.children)
    for k, child in keyed(d.children).items():
        twin = bench_keys.get(k)
        if twin is not None and twin.match is None:
            link(child, twin, "fuzzy")


def _mapped_name(name: str, layer_map: Mapping[str, Mapping[str, str]]) -> str:
    """Apply the YAML's renames to a module path: `{Class: {bench_attr: debug_attr}}` or a flat
    `{bench_attr: debug_attr}` applied everywhere."""
    parts = name.split(".")
    renames: Dict[str, str] = {}
    for key, value in layer_map.items():
        if isinstance(value, Mapping):
            renames.update({str(a): str(b) for a, b in value.items()})
        else:
            renames[str(key)] = str(value)
    return ".".join(renames.get(p, p) for p in parts)


def mapping_rules(layer_map: Mapping) -> List[Tuple[str, str, Optional[str]]]:
    """(label, attribute, class) of each rename in a layer mapping: `Class: bench_attr -> debug_attr`, or
    `bench_attr -> debug_attr` for a flat one (class None); the attribute is the name part it renames."""
    out: List[Tuple[str, str, Optional[str]]] = []
    for key, value in layer_map.items():
        if isinstance(value, Mapping):
            out += [(f"{key}: {a} -> {b}", str(a), str(key)) for a, b in value.items()]
        else:
            out.append((f"{key} -> {value}", str(key), None))
    return out


def unused_mapping_rules(layer_map: Optional[Mapping], *graphs: Graph) -> List[str]:
    """The warnings of a layer mapping's parts that can match nothing in the graphs (a typo, a path or a class
    that is not there): one per rename whose attribute is a part of no node name, one per class key that is the
    class of no module (`Module.<path>.<Class>.forward.<n>`). tbprobe applies a rename under any class, so a
    wrong class changes nothing here, but it is a typo all the same (msprobe's rule matches nothing then)."""
    rules = mapping_rules(layer_map or {})
    if not rules:
        return []
    parts = set()
    classes = set()
    for graph in graphs:
        for name in graph.nodes:
            parts.update(name.split("."))
            if name.startswith(("Module.", "Cell.")):
                m = MODULE_NAME.match(name)
                if m:
                    classes.add(m.group(1).rsplit(".", 1)[-1])
    out = [f"layer mapping rule {label!r} matched no node (no module or API name holds its attribute)"
           for label, attr, _cls in rules if attr not in parts]
    for cls in sorted({cls for _label, _attr, cls in rules if cls is not None and cls not in classes}):
        out.append(f"layer mapping class {cls!r} is the class of no module (no module name holds it; tbprobe "
                   "applies its renames under any class all the same)")
    return out


def _match_mapped(d: Node, b: Node, layer_map: Mapping[str, Mapping[str, str]]) -> None:
    bench = {}
    for c in b.children:
        if c.match is None:
            bench.setdefault(strip_counters(_mapped_name(c.name, layer_map)), []).append(c)
    for child in d.children:
        if child.match is not None:
            continue
        key = strip_counters(_mapped_name(child.name, layer_map))
        options = bench.get(key)
        if options:
            link(child, options.pop(0), "layer_mapping")


def _align(d: Node, b: Node) -> None:
    left = [c for c in d.children if c.match is None]
    right = [c for c in b.children if c.match is None]
    if not left or not right:
        return
    # diff_pairs bounds the cost on long repetitive lists (difflib alone is quadratic there)
    for i, j in diff_pairs([signature(c) for c in left], [signature(c) for c in right]):
        link(left[i], right[j], "aligned")
    # second chance: same name without counters and direction, in order, ignoring shapes
    left = [c for c in d.children if c.match is None]
    right = [c for c in b.children if c.match is None]
    if left and right:
        for i, j in diff_pairs([signature(c)[:2] for c in left], [signature(c)[:2] for c in right]):
            x, y = left[i], right[j]
            if similar_groups(x, y):
                link(x, y, "aligned")


def _apply_manual(debug: Graph, bench: Graph, manual: Mapping[str, str]) -> None:
    for dname, bname in manual.items():
        d = debug.nodes.get(dname)
        b = bench.nodes.get(bname)
        if d is None or b is None:
            continue
        if d.match is not None:
            d.match.match = None
        if b.match is not None:
            b.match.match = None
        link(d, b, "manual")
