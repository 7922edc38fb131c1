"""Matching: exact, fuzzy, structural aligner, layer mapping, manual."""
import difflib
import json
from typing import Optional

import pytest

from tbprobe.graph_builder import run_graph
from tbprobe.graph_builder.match import match_graphs
from tbprobe.graph_builder.model import Graph, Node
from tests.graph_builder import golden, synth


def _unmatched(path, side="NPU"):
    nodes = golden.nodes(path)
    return {n["node_name"] for n in nodes.values() if n["data_source"] == side and n["matched_node_link"] == "[]"}


def test_extra_api_case_leaves_only_the_extra_calls(tmp_path):
    result = run_graph(str(golden.INPUTS / "npu_stat"), str(golden.INPUTS / "bench_stat"), str(tmp_path),
                       parallel=False, progress=False)
    assert _unmatched(result.path) == {"Tensor.__mul__.0.forward", "Tensor.__mul__.1.forward", "Torch.exp.0.forward",
                                       "Tensor.__mul__.0.backward"}
    assert _unmatched(result.path, "Bench") == set()


def test_step0_against_step1_of_one_run_is_aligned(tmp_path):
    """The next step's names carry shifted counters: exact matching pairs nothing below the root, the aligner
    pairs all but < 1%."""
    docs = synth.read_rank("npu_stat")
    synth.write_rank(tmp_path / "a" / "step0" / "rank0", docs)
    synth.write_rank(tmp_path / "b" / "step1" / "rank0", synth.rename_all(docs, synth.next_step_names(docs)))
    plain = run_graph(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "o1"), parallel=False,
                      progress=False, align=False)
    aligned = run_graph(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "o2"), parallel=False,
                        progress=False)
    total = plain.summary["nodes"] - 1
    assert plain.summary["unmatched"] > 0.3 * total          # the reference's behaviour: most nodes grey
    assert aligned.summary["unmatched"] < 0.01 * total
    nodes = golden.nodes(aligned.path)
    row = nodes["NPU_0_0_Functional.linear.2.forward"]
    assert json.loads(row["matched_node_link"])[-1] == "Functional.linear.6.forward"
    assert row["precision_index"] == 0


def test_aligner_skips_an_inserted_call_and_keeps_the_rest(tmp_path):
    t = synth.tensor
    common = {"Torch.matmul.0.forward": synth.api_entry([t((2, 4)), t((4, 4))], [t((2, 4))]),
              "Tensor.__add__.0.forward": synth.api_entry([t((2, 4))]),
              "Torch.relu.0.forward": synth.api_entry([t((2, 4))])}
    debug = {"Torch.matmul.0.forward": common["Torch.matmul.0.forward"],
             "Tensor.__add__.0.forward": synth.api_entry([t((8,))]),   # the extra call
             "Tensor.__add__.1.forward": common["Tensor.__add__.0.forward"],
             "Torch.relu.0.forward": common["Torch.relu.0.forward"]}
    parent = "Module.block.Block.forward.0"
    mod = synth.api_entry()
    synth.simple_rank(tmp_path / "d", {**debug, parent: mod}, {**{k: parent for k in debug}, parent: None})
    synth.simple_rank(tmp_path / "b", {**common, parent: mod}, {**{k: parent for k in common}, parent: None})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    nodes = golden.nodes(result.path)
    assert _unmatched(result.path) == {"Tensor.__add__.0.forward"}
    link = json.loads(nodes["NPU_0_0_Tensor.__add__.1.forward"]["matched_node_link"])
    assert link == ["DefaultModel", parent, "Tensor.__add__.0.forward"]


def test_fuzzy_matches_by_occurrence(tmp_path):
    t = synth.tensor
    parent = "Module.block.Block.forward.0"
    d = {"Torch.matmul.3.forward": synth.api_entry([t((2, 2))]), parent: synth.api_entry()}
    b = {"Torch.matmul.7.forward": synth.api_entry([t((3, 3))]), parent: synth.api_entry()}
    synth.simple_rank(tmp_path / "d", d, {"Torch.matmul.3.forward": parent, parent: None})
    synth.simple_rank(tmp_path / "b", b, {"Torch.matmul.7.forward": parent, parent: None})
    off = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o1"), parallel=False,
                    progress=False, align=False)
    assert _unmatched(off.path) == {"Torch.matmul.3.forward"}
    on = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o2"), parallel=False,
                   progress=False, align=False, fuzzy=True)
    assert _unmatched(on.path) == set()
    # shapes differ: the pair is compared and flagged
    assert golden.nodes(on.path)["NPU_0_0_Torch.matmul.3.forward"]["precision_index"] == 1


def test_layer_mapping_renames(tmp_path):
    parent_d = "Module.layers.0.input_norm.RMSNorm.forward.0"
    parent_b = "Module.layers.0.input_layernorm.RMSNorm.forward.0"
    synth.simple_rank(tmp_path / "d", {parent_d: synth.api_entry()}, {parent_d: None})
    synth.simple_rank(tmp_path / "b", {parent_b: synth.api_entry()}, {parent_b: None})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False, align=False,
                       layer_mapping={"ParallelTransformerLayer": {"input_layernorm": "input_norm"}})
    assert _unmatched(result.path) == set()


def _layer_ranks(tmp_path):
    """A decoder layer (class Layer) holding its norm, named input_norm on the debug side."""
    layer = "Module.layers.0.Layer.forward.0"
    for side, attr in (("d", "input_norm"), ("b", "input_layernorm")):
        norm = f"Module.layers.0.{attr}.RMSNorm.forward.0"
        synth.simple_rank(tmp_path / side, {norm: synth.api_entry(), layer: synth.api_entry()},
                          {norm: layer, layer: None})


def _mapping_output(tmp_path, capsys, command: str, mapping: str, out: str) -> str:
    """What `tbprobe <command>` (graph or compare) on _layer_ranks' dumps with the layer mapping `mapping` (YAML
    text) writes where its warnings go: graph's summary on stdout, compare's on stderr."""
    from tbprobe.cli import main

    path = tmp_path / f"{out}.yaml"
    path.write_text(mapping)
    args = [command, "-tp", str(tmp_path / "d"), "-gp", str(tmp_path / "b"), "-o", str(tmp_path / out),
            "-lm", str(path)]
    assert main(args + (["-q", "--no-align"] if command == "graph" else [])) == 0
    captured = capsys.readouterr()
    return captured.out if command == "graph" else captured.err


def test_a_layer_mapping_rule_that_matches_nothing_is_named_in_a_warning(tmp_path, capsys):
    """A rule whose attribute no node name holds (a typo: input_layernormX) was accepted without a word, the run
    looking like an unmapped one. Both commands name each such rule; the rule that applies is not named."""
    _layer_ranks(tmp_path)
    typo = "Layer:\n  input_layernormX: input_norm\n  layers: layers\n"
    out = _mapping_output(tmp_path, capsys, "graph", typo, "o")
    assert "warning: layer mapping rule 'Layer: input_layernormX -> input_norm' matched no node" in out, out
    assert "'Layer: layers -> layers'" not in out
    err = _mapping_output(tmp_path, capsys, "compare", typo, "t")
    assert "layer mapping rule 'Layer: input_layernormX -> input_norm' matched no node" in err, err
    assert "layers -> layers" not in err
    # the right rule: no warning
    assert "layer mapping rule" not in _mapping_output(tmp_path, capsys, "graph",
                                                       "Layer:\n  input_layernorm: input_norm\n", "o2")


def test_a_layer_mapping_class_that_no_module_has_is_named_in_a_warning(tmp_path, capsys):
    """The warning looked at a rule's attribute alone: a typo in its class (Layr for Layer) was never named.
    tbprobe applies the rename under any class, so the nodes still match; the class is named all the same."""
    _layer_ranks(tmp_path)
    typo = "Layr:\n  input_layernorm: input_norm\n"
    out = _mapping_output(tmp_path, capsys, "graph", typo, "o")
    assert "warning: layer mapping class 'Layr' is the class of no module" in out, out
    assert "matched no node" not in out   # (its attribute is there)
    assert ("warning: layer mapping class 'Layr' is the class of no module"
            in _mapping_output(tmp_path, capsys, "compare", typo, "t"))
    assert "layer mapping" not in _mapping_output(tmp_path, capsys, "graph",
                                                  "Layer:\n  input_layernorm: input_norm\n", "o2")


def test_a_rank_pair_that_did_not_look_at_the_mapping_does_not_hide_its_warnings():
    """The warnings are those every rank pair has: a pair whose summary holds none computed (the default) made
    the intersection empty, and no rule was named for any rank."""
    from tbprobe.graph_builder.engine import RankSummary
    from tbprobe.graph_builder.run import unused_rule_notes

    warned = RankSummary(0, 0, "statistics", 1, unused_rules=("rule a", "rule b"))
    also = RankSummary(0, 1, "statistics", 1, unused_rules=("rule b",))
    not_looked = RankSummary(0, 2, "statistics", 1)
    assert unused_rule_notes([warned, not_looked]) == ["rule a", "rule b"]
    assert unused_rule_notes([warned, not_looked, also]) == ["rule b"]
    assert unused_rule_notes([not_looked]) == []
    assert unused_rule_notes([warned, RankSummary(0, 3, "statistics", 1, unused_rules=())]) == []


def test_manual_matches_override(tmp_path):
    synth.simple_rank(tmp_path / "d", {"Torch.a.0.forward": synth.api_entry()}, {"Torch.a.0.forward": None})
    synth.simple_rank(tmp_path / "b", {"Torch.b.0.forward": synth.api_entry()}, {"Torch.b.0.forward": None})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False, align=False, manual={"Torch.a.0.forward": "Torch.b.0.forward"})
    assert _unmatched(result.path) == set()
    ext = golden.open_ro(result.path).execute(
        "SELECT flags FROM tbprobe_node_ext WHERE id='NPU_0_0_Torch.a.0.forward'").fetchone()[0]
    assert "manual" in json.loads(ext)


def test_a_call_hung_one_level_higher_on_one_side_is_matched(tmp_path):
    """msprobe hangs the backward calls inside a module called with keyword arguments only under that module's
    parent; tbprobe under the module. Same names, a different depth: still one call each."""
    t = synth.tensor
    layer, attn = "Module.layer.Layer.backward.0", "Module.layer.attn.Attn.backward.0"
    q, op = "Module.layer.attn.q.Linear.backward.0", "Tensor.__mul__.3.backward"
    entries = {layer: synth.api_entry([t((2, 4))]), attn: synth.api_entry([t((2, 4))]),
               q: synth.api_entry([t((2, 4))]), op: synth.api_entry([t((2, 4))])}
    synth.simple_rank(tmp_path / "d", entries, {layer: None, attn: layer, q: attn, op: attn})
    synth.simple_rank(tmp_path / "b", entries, {layer: None, attn: layer, q: layer, op: layer})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _unmatched(result.path) == set() and _unmatched(result.path, "Bench") == set()
    link = json.loads(golden.nodes(result.path)[f"NPU_0_0_{q}"]["matched_node_link"])
    assert link == ["DefaultModel", layer, q]


def test_a_same_named_call_in_an_unrelated_subtree_stays_unmatched(tmp_path):
    t = synth.tensor
    a, b, x = "Module.a.A.forward.0", "Module.b.B.forward.0", "Torch.relu.0.forward"
    entries = {a: synth.api_entry([t((2, 4))]), b: synth.api_entry([t((2, 4))]), x: synth.api_entry([t((2, 4))])}
    synth.simple_rank(tmp_path / "d", entries, {a: None, b: None, x: a})
    synth.simple_rank(tmp_path / "b", entries, {a: None, b: None, x: b})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    assert _unmatched(result.path) == {x} and _unmatched(result.path, "Bench") == {x}


def test_an_operators_backward_follows_its_forwards_twin(tmp_path):
    """One extra add in the debug run (h + (s - s), the same numbers): the aligner paired the forwards around it,
    but the exact pass had already paired the backward records by name, their gradients having one shape: the
    extra add's backward took the bench's residual add's, a false error named the first divergence."""
    T = synth.tensor
    h, s = T((4, 8), norm=2.0), T((4, 1), norm=0.5)

    def bw(norm):
        return {"input": [T((4, 8), norm=1.0)], "output": [T((4, 8), norm=1.0), T((4, 8), norm=norm)]}

    debug = {"Tensor.__add__.0.forward": synth.api_entry([h, h], [h]),
             "Tensor.__add__.1.forward": synth.api_entry([h, s], [h]),          # the extra call
             "Tensor.__add__.2.forward": synth.api_entry([h, h], [h]),
             "Tensor.__add__.2.backward": bw(3.0),
             "Tensor.__add__.1.backward": bw(0.1),
             "Tensor.__add__.0.backward": bw(5.0)}
    bench = {"Tensor.__add__.0.forward": synth.api_entry([h, h], [h]),
             "Tensor.__add__.1.forward": synth.api_entry([h, h], [h]),
             "Tensor.__add__.1.backward": bw(3.0),
             "Tensor.__add__.0.backward": bw(5.0)}
    synth.simple_rank(tmp_path / "d", debug, {k: None for k in debug})
    synth.simple_rank(tmp_path / "b", bench, {k: None for k in bench})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    nodes = golden.nodes(result.path)
    twin = {n["node_name"]: json.loads(n["matched_node_link"])[-1:] for n in nodes.values()
            if n["data_source"] == "NPU" and n["node_name"].startswith("Tensor.")}
    assert twin == {"Tensor.__add__.0.forward": ["Tensor.__add__.0.forward"], "Tensor.__add__.1.forward": [],
                    "Tensor.__add__.2.forward": ["Tensor.__add__.1.forward"],
                    "Tensor.__add__.2.backward": ["Tensor.__add__.1.backward"], "Tensor.__add__.1.backward": [],
                    "Tensor.__add__.0.backward": ["Tensor.__add__.0.backward"]}
    assert result.summary["error"] == 0 and result.summary["first_divergence"] is None
    # without the aligner, names alone pair them, as the reference does
    plain = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "p"), parallel=False,
                      progress=False, align=False)
    assert plain.summary["error"] > 0


def test_a_pair_whose_names_agree_is_not_crossed_by_the_diff(tmp_path):
    """Debug matmul.0 has a real shape difference and the bench one extra call at the end: the diff of keys
    alone paired debug matmul.1 with the bench's matmul.0 (the first equal key) and matmul.0 with matmul.1, so
    the healthy call was compared with another call."""
    t = synth.tensor
    parent = "Module.block.Block.forward.0"
    debug = {"Torch.matmul.0.forward": synth.api_entry([t((3, 4)), t((4, 4))], [t((3, 4))]),
             "Torch.matmul.1.forward": synth.api_entry([t((2, 4)), t((4, 4))], [t((2, 4))])}
    bench = {"Torch.matmul.0.forward": synth.api_entry([t((2, 4)), t((4, 4))], [t((2, 4))]),
             "Torch.matmul.1.forward": synth.api_entry([t((2, 4)), t((4, 4))], [t((2, 4))]),
             "Torch.relu.0.forward": synth.api_entry([t((2, 4))], [t((2, 4))])}
    mod = synth.api_entry()
    synth.simple_rank(tmp_path / "d", {**debug, parent: mod}, {**{k: parent for k in debug}, parent: None})
    synth.simple_rank(tmp_path / "b", {**bench, parent: mod}, {**{k: parent for k in bench}, parent: None})
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    nodes = golden.nodes(result.path)
    for name in debug:
        assert json.loads(nodes[f"NPU_0_0_{name}"]["matched_node_link"])[-1] == name
    assert nodes["NPU_0_0_Torch.matmul.1.forward"]["precision_index"] == 0
    assert _unmatched(result.path, "Bench") == {"Torch.relu.0.forward"}


def _entry(dtype, shape):
    return {"input_args": [{"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": 1, "Min": 0,
                            "Mean": 0.5, "Norm": 1, "requires_grad": False}], "output": []}


def _one_group(calls):
    """A graph whose root holds one group of top-level calls, [(name, entry)] in order."""
    g = Graph("NPU", 0, 0)
    group = Node("Apis_Between_Modules.0", "9")
    group.parent = g.root
    g.root.children.append(group)
    g.nodes[group.name] = group
    for name, entry in calls:
        node = Node(name, "1", entry=entry)
        node.parent = group
        group.children.append(node)
        g.nodes[name] = node
    return g


N = 20_000


@pytest.mark.parametrize("case", ["same names", "shifted counters", "other dtype"])
def test_a_long_repetitive_child_list_is_not_diffed_quadratically(monkeypatch, case):
    """An optimizer's 20,000 add_ calls with an extra call at each end (the head and tail trim cannot help):
    difflib over the whole list costs up to len * len steps (6,000 children took 3 s, 20,000 minutes). No diff
    may be asked of more than 4e6 pairs, and the result stays the right one."""
    asked = []

    class Bounded(difflib.SequenceMatcher):
        def __init__(self, isjunk=None, a="", b="", autojunk=True):
            asked.append(len(a) * len(b))
            assert len(a) * len(b) <= 4_000_000, f"a diff of {len(a)} x {len(b)} children"
            super().__init__(isjunk, a, b, autojunk)

    monkeypatch.setattr(difflib, "SequenceMatcher", Bounded)
    f32 = "torch.float32"
    extra = [("Torch.extra.0.forward", _entry(f32, (7, 7)))], [("Torch.extra2.0.forward", _entry(f32, (7, 7)))]
    if case == "same names":
        bench = [(f"Tensor.add_.{i}.forward", _entry(f32, (16,))) for i in range(N)]
        debug = bench
        want = {f"Tensor.add_.{i}.forward": f"Tensor.add_.{i}.forward" for i in range(N)}
    elif case == "shifted counters":
        # one more add_ first (another shape): every later counter is one up; shapes cycle, so keys tell
        bench = [(f"Tensor.add_.{i}.forward", _entry(f32, (i % 50 + 1,))) for i in range(N)]
        debug = [("Tensor.add_.0.forward", _entry(f32, (99,)))] + [
            (f"Tensor.add_.{i + 1}.forward", _entry(f32, (i % 50 + 1,))) for i in range(N)]
        want = {"Tensor.add_.0.forward": None,
                **{f"Tensor.add_.{i + 1}.forward": f"Tensor.add_.{i}.forward" for i in range(N)}}
    else:
        # bf16 against fp32: no key agrees but every tenth call's; the rest pairs by name afterwards
        def calls(dtype):
            return [(f"Torch.embedding.{i // 10}.forward", _entry("torch.int64", (4, 16))) if i % 10 == 0
                    else (f"Torch.matmul.{i}.forward", _entry(dtype, (16, 16))) for i in range(N)]
        bench = calls(f32)
        debug = calls("torch.bfloat16")
        want = {name: name for name, _ in bench}
    d = _one_group(extra[0] + debug + extra[1])
    b = _one_group(bench)
    match_graphs(d, b)
    got = {name: node.match.name if node.match else None for name, node in d.nodes.items()
           if name.startswith("T")}
    assert got == {**want, "Torch.extra.0.forward": None, "Torch.extra2.0.forward": None}
    assert all(n.match is not None for n in b.nodes.values())


def _batch(irecv_buffer: Optional[dict]) -> dict:
    """A batch_isend_irecv record of one isend and one irecv: the irecv's tensor is the buffer before the call in
    msprobe's record, nothing in tbprobe's; the output holds what was received."""
    t = synth.tensor
    ops = [{"class_type": "torch.distributed.P2POp", "tensor": t((2, 4)), "op": "isend", "peer": 1},
           {"class_type": "torch.distributed.P2POp", "tensor": irecv_buffer, "op": "irecv", "peer": 1}]
    return {"input_args": [ops], "input_kwargs": {}, "output": [t((2, 4))]}


def test_a_batch_isend_irecv_pairs_by_its_sends_not_by_its_receive_buffers(tmp_path):
    """tbprobe's batch_isend_irecv records no irecv buffer, msprobe's records the buffer as it was before the
    call: the two records of one batch had inputs of different shapes. With msprobe's first batch in a group of
    top-level calls (beside an irecv it lists early under Schedule1F1B, docs/compatibility.md), the aligner paired
    tbprobe's first batch with msprobe's second and left tbprobe's second unmatched. Now each pairs with its
    namesake."""
    t = synth.tensor
    mod = {f"Module.{m}.Linear.forward.0": synth.api_entry() for m in "abcd"}
    irecv = {"input_args": [None], "input_kwargs": {}, "output": [t((2, 4))]}
    debug = {"Module.a.Linear.forward.0": mod["Module.a.Linear.forward.0"],
             "Distributed.batch_isend_irecv.0.forward": _batch(None),
             "Module.b.Linear.forward.0": mod["Module.b.Linear.forward.0"],
             "Distributed.batch_isend_irecv.1.forward": _batch(None),
             "Module.c.Linear.forward.0": mod["Module.c.Linear.forward.0"],
             "Distributed.irecv.0.forward": irecv,
             "Module.d.Linear.forward.0": mod["Module.d.Linear.forward.0"]}
    bench = {"Module.a.Linear.forward.0": mod["Module.a.Linear.forward.0"],
             "Distributed.batch_isend_irecv.0.forward": _batch(t((2, 4))),
             "Distributed.irecv.0.forward": irecv,
             "Module.b.Linear.forward.0": mod["Module.b.Linear.forward.0"],
             "Distributed.batch_isend_irecv.1.forward": _batch(t((2, 4))),
             "Module.c.Linear.forward.0": mod["Module.c.Linear.forward.0"],
             "Module.d.Linear.forward.0": mod["Module.d.Linear.forward.0"]}
    synth.simple_rank(tmp_path / "d", debug, dict.fromkeys(debug))
    synth.simple_rank(tmp_path / "b", bench, dict.fromkeys(bench))
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "o"), parallel=False,
                       progress=False)
    nodes = golden.nodes(result.path)
    links = {n["node_name"]: json.loads(n["matched_node_link"]) for n in nodes.values() if n["data_source"] == "NPU"}
    # (msprobe's first batch and its early irecv, two top-level calls in a row, form a group)
    assert links["Distributed.batch_isend_irecv.0.forward"][-2:] == [
        "Apis_Between_Modules.0", "Distributed.batch_isend_irecv.0.forward"]
    assert links["Distributed.batch_isend_irecv.1.forward"] == ["DefaultModel", "Distributed.batch_isend_irecv.1.forward"]
    assert all(link and link[-1] == name for name, link in links.items() if name != "DefaultModel"), links
