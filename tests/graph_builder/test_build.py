"""Building the tree (REFERENCE.md section 3) beyond what the fixtures show: orphans, backward repair,
parameters_grad, API collections, micro steps (plain and Megatron), recomputation, stacks."""
import json

from tbprobe.formats.dump_dir import discover
from tbprobe.graph_builder import build_rank_rows
from tbprobe.graph_builder.build import build_graph
from tests.graph_builder import golden, synth


def _tree(graph):
    return {n.name: (n.parent.name if n.parent else None) for n in graph.nodes.values()}


def test_orphan_subtree_is_kept_and_flagged():
    entries = {"Torch.a.0.forward": synth.api_entry(), "Module.x.X.forward.0": synth.api_entry()}
    parents = {"Torch.a.0.forward": "Module.gone.G.forward.0", "Module.x.X.forward.0": None}
    g = build_graph("NPU", 0, 0, entries, parents)
    tree = _tree(g)
    assert tree["Torch.a.0.forward"] == "Module.gone.G.forward.0"
    assert tree["Module.gone.G.forward.0"] == "DefaultModel"
    assert g.nodes["Module.gone.G.forward.0"].flags == ["missing_parent"]


def test_backward_parent_repair_and_parameters_grad():
    entries = {n: synth.api_entry() for n in ("Functional.linear.0.forward", "Module.fc.Linear.forward.0",
                                             "Functional.linear.0.backward")}
    entries["Module.fc.Linear.parameters_grad.0"] = {"weight": [synth.tensor((2, 2))]}
    entries["Module.fc.Linear.backward.0"] = synth.api_entry()
    parents = {"Functional.linear.0.forward": "Module.fc.Linear.forward.0", "Module.fc.Linear.forward.0": None,
               "Functional.linear.0.backward": None, "Module.fc.Linear.backward.0": None}
    g = build_graph("NPU", 0, 0, entries, parents)
    tree = _tree(g)
    assert tree["Functional.linear.0.backward"] == "Module.fc.Linear.backward.0"
    assert tree["Module.fc.Linear.parameters_grad.0"] == "Module.fc.Linear.backward.0"
    assert [c.name for c in g.nodes["Module.fc.Linear.backward.0"].children] == [
        "Functional.linear.0.backward", "Module.fc.Linear.parameters_grad.0"]


def _inplace_block(recorded_parent_of_conv2):
    """A ResNet BasicBlock whose ReLU runs in place: in backward, conv2's call is recorded under the ReLU's
    backward call (a module that cannot hold it), as the reference's own example shows."""
    b = "Module.layer4.1"
    fwd = {f"{b}.BasicBlock.forward.0": None, f"{b}.conv1.Conv2d.forward.0": f"{b}.BasicBlock.forward.0",
           f"{b}.relu.ReLU.forward.0": f"{b}.BasicBlock.forward.0",
           f"{b}.conv2.Conv2d.forward.0": f"{b}.BasicBlock.forward.0",
           f"{b}.relu.ReLU.forward.1": f"{b}.BasicBlock.forward.0"}
    bwd = {f"{b}.BasicBlock.backward.0": None, f"{b}.relu.ReLU.backward.1": f"{b}.BasicBlock.backward.0",
           f"{b}.conv2.Conv2d.backward.0": recorded_parent_of_conv2,
           f"{b}.relu.ReLU.backward.0": f"{b}.BasicBlock.backward.0",
           f"{b}.conv1.Conv2d.backward.0": f"{b}.BasicBlock.backward.0"}
    parents = {**fwd, **bwd}
    return build_graph("NPU", 0, 0, {n: synth.api_entry() for n in parents}, parents)


def test_inplace_module_backward_children_are_moved_to_the_right_module():
    g = _inplace_block("Module.layer4.1.relu.ReLU.backward.1")
    tree = _tree(g)
    assert tree["Module.layer4.1.conv2.Conv2d.backward.0"] == "Module.layer4.1.BasicBlock.backward.0"
    assert [c.name for c in g.nodes["Module.layer4.1.relu.ReLU.backward.1"].children] == []
    assert [c.name for c in g.nodes["Module.layer4.1.BasicBlock.backward.0"].children] == [
        "Module.layer4.1.relu.ReLU.backward.1", "Module.layer4.1.conv2.Conv2d.backward.0",
        "Module.layer4.1.relu.ReLU.backward.0", "Module.layer4.1.conv1.Conv2d.backward.0"]
    # a parent that can hold the call (its own block) is kept as recorded
    g = _inplace_block("Module.layer4.1.BasicBlock.backward.0")
    assert _tree(g)["Module.layer4.1.conv2.Conv2d.backward.0"] == "Module.layer4.1.BasicBlock.backward.0"


def test_inplace_repair_keeps_the_recorded_parent_when_the_forward_gives_nothing_better():
    b = "Module.layer4.1"
    # the forward twin had no parent: the call goes to the top level, as the reference does
    parents = {f"{b}.conv2.Conv2d.forward.0": None, f"{b}.relu.ReLU.backward.1": None,
               f"{b}.conv2.Conv2d.backward.0": f"{b}.relu.ReLU.backward.1"}
    g = build_graph("NPU", 0, 0, {n: synth.api_entry() for n in parents}, parents)
    assert _tree(g)[f"{b}.conv2.Conv2d.backward.0"] == "DefaultModel"
    # no forward twin, or its parent's backward call never happened: the recorded parent stays
    parents = {f"{b}.BasicBlock.forward.0": None, f"{b}.conv2.Conv2d.forward.0": f"{b}.BasicBlock.forward.0",
               f"{b}.relu.ReLU.backward.1": None, f"{b}.conv2.Conv2d.backward.0": f"{b}.relu.ReLU.backward.1",
               f"{b}.conv3.Conv2d.backward.0": f"{b}.relu.ReLU.backward.1"}
    g = build_graph("NPU", 0, 0, {n: synth.api_entry() for n in parents}, parents)
    tree = _tree(g)
    assert tree[f"{b}.conv2.Conv2d.backward.0"] == f"{b}.relu.ReLU.backward.1"
    assert tree[f"{b}.conv3.Conv2d.backward.0"] == f"{b}.relu.ReLU.backward.1"


def test_api_collections_and_micro_steps():
    names = ["Module.m.M.forward.0", "Torch.a.0.forward", "Torch.b.0.forward", "Module.m.M.backward.0",
             "Module.m.M.forward.1", "Torch.c.0.forward", "Module.m.M.backward.1"]
    entries = {n: synth.api_entry() for n in names}
    g = build_graph("NPU", 0, 0, entries, {n: None for n in names})
    top = [c.name for c in g.root.children]
    assert top == ["Module.m.M.forward.0", "Apis_Between_Modules.0", "Module.m.M.backward.0",
                   "Module.m.M.forward.1", "Torch.c.0.forward", "Module.m.M.backward.1"]
    assert g.nodes["Apis_Between_Modules.0"].node_type == "9"
    assert [g.nodes[n].micro_step for n in names] == [0, 0, 0, 0, 1, 1, 1]
    assert g.micro_steps == 2


def test_optimizer_and_clip_grad_are_module_nodes_never_grouped():
    """The collectors' pseudo parents were API nodes: two in a row (clip_grad, then optimizer) went under an
    Apis_Between_Modules of their own, a node msprobe's graph of the same dump does not have (checked: 442 nodes
    against its 441 on a GPT at mix)."""
    top = ["Module.m.M.forward.0", "Module.m.M.backward.0", "clip_grad", "optimizer", "Torch.a.0.forward"]
    parents = {n: None for n in top}
    parents.update({"Torch.norm.0.forward": "clip_grad", "Torch.mul.0.forward": "clip_grad",
                    "Torch.add.0.forward": "optimizer"})
    entries = {n: synth.api_entry() for n in parents if n not in ("clip_grad", "optimizer")}
    g = build_graph("NPU", 0, 0, entries, parents)
    assert [c.name for c in g.root.children] == top
    assert g.nodes["clip_grad"].node_type == g.nodes["optimizer"].node_type == "0"
    assert [c.name for c in g.nodes["clip_grad"].children] == ["Torch.norm.0.forward", "Torch.mul.0.forward"]


def test_megatron_micro_steps_are_explicit():
    names = ["Module.m.M.forward.0", "Module.m.M.forward.1"]
    g = build_graph("NPU", 0, 0, {n: synth.api_entry() for n in names}, {n: None for n in names},
                    micro_steps={"Module.m.M.forward.0": 0, "Module.m.M.forward.1": 3})
    assert [g.nodes[n].micro_step for n in names] == [0, 3]
    assert g.micro_steps == 4


def test_recomputed_layer_goes_under_its_backward():
    names = ["Module.l.L.forward.0", "Module.l.L.forward.1", "Module.l.L.backward.0"]
    g = build_graph("NPU", 0, 0, {n: synth.api_entry() for n in names}, {n: None for n in names})
    assert _tree(g)["Module.l.L.forward.1"] == "Module.l.L.backward.0"
    assert "recomputed" in g.nodes["Module.l.L.forward.1"].flags


def test_backward_takes_forward_stack():
    entries = {"Torch.a.0.forward": synth.api_entry(), "Torch.a.0.backward": synth.api_entry()}
    g = build_graph("NPU", 0, 0, entries, {}, {"Torch.a.0.forward": ["File x.py, line 1, in f, \n a()"]})
    assert g.nodes["Torch.a.0.backward"].stack == g.nodes["Torch.a.0.forward"].stack


def test_build_rank_rows_for_the_collector():
    rank_dir = discover(golden.INPUTS / "npu_stat")[0]
    rows, stacks, ext = build_rank_rows(rank_dir, "NPU", overflow_check=True)
    ref = golden.nodes(golden.reference_db("build"))
    assert {r[0] for r in rows} == set(ref)
    by_id = {r[0]: r for r in rows}
    assert by_id["NPU_0_0_Torch.exp.0.forward"][8] == "critical"
    assert len(rows[0]) == 22 and len(ext) == len(rows)
    assert all(json.loads(s[1]) is not None for s in stacks)


def test_an_argument_described_by_its_fields_shows_its_tensor():
    # msprobe (and tbprobe) write batch_isend_irecv's P2POp as {"class_type": ..., "tensor": item, "op": "isend",
    # "peer": 1, ...}: the graph builder refused the dump ("a bare str")
    from tbprobe.graph_builder.items import flatten_entry

    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3], "Max": 5.0, "Min": 5.0,
              "Mean": 5.0, "Norm": 8.66, "requires_grad": False}
    op = {"class_type": "torch.distributed.P2POp", "tensor": tensor, "op": "isend", "peer": 1, "tag": 0,
          "group_id": "77849d8c"}
    inputs, outputs = flatten_entry("Distributed.batch_isend_irecv.0.forward",
                                    {"input_args": [[op]], "input_kwargs": {}, "output": [[op]]})
    assert inputs == [("Distributed.batch_isend_irecv.0.forward.input.0.0", tensor)]
    assert outputs == [("Distributed.batch_isend_irecv.0.forward.output.0.0", tensor)]


def _chain_build_lines(depth):
    """Lines of build.py run while building a construct.json chain `depth` levels deep (counted, not timed)."""
    import sys

    from tbprobe.graph_builder import build as build_module
    names = [f"Module.m{i}.Linear.forward.0" for i in range(depth)]
    parents = {name: (names[i - 1] if i else None) for i, name in enumerate(names)}
    entries = {name: synth.api_entry() for name in names}
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename != build_module.__file__:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        graph = build_graph("NPU", 0, 0, entries, parents)
    finally:
        sys.settrace(None)
    deepest, depth_seen = graph.nodes[names[-1]], 0
    while deepest.parent is not None:
        deepest, depth_seen = deepest.parent, depth_seen + 1
    assert depth_seen == depth          # every level kept, under DefaultModel
    return count


def test_long_parent_chain_builds_in_linear_work():
    # the cycle guard walked every ancestor on each attach: a 100,000-level chain took minutes
    small, large = _chain_build_lines(1000), _chain_build_lines(4000)
    assert large < 6 * small, (small, large)


def test_cycle_through_a_long_chain_is_broken_once():
    names = [f"Module.m{i}.Linear.forward.0" for i in range(50)]
    parents = {name: names[i - 1] for i, name in enumerate(names)}      # m0's parent is m49: a ring
    g = build_graph("NPU", 0, 0, {n: synth.api_entry() for n in names}, parents)
    broken = [n.name for n in g.nodes.values() if "cycle_broken" in (n.flags or [])]
    assert len(broken) == 1
    tree = _tree(g)
    assert tree[broken[0]] == "DefaultModel"
    for name in names:                    # every node still reaches the root
        node, hops = g.nodes[name], 0
        while node.parent is not None and hops <= 60:
            node, hops = node.parent, hops + 1
        assert node is g.root
