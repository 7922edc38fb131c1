"""msprobe (the reference) reads tbprobe's dumps: graph_visualize builds and compares them, and finds the same
nodes as in msprobe's own dump of the same model; checksums equal msprobe's bit for bit."""
import glob
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import PEER_MSPROBE, PEER_PYTHON, load_rank, make_debugger, need_peers, rank_dirs, stack_lines, vis_nodes
from run_model import train
from train_hf import HF_PATH, have_transformers

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.peers


def msprobe_dump(tmp_path, model, level, mode="statistics", steps=1, task="statistics", block=None):
    """msprobe's dump of run_model.py's `model`; `block`: more keys of the task block (scope, list ...)."""
    out = str(tmp_path / f"ms_{model}_{level}_{mode}_{task}")
    subprocess.run([PEER_PYTHON, os.path.join(HERE, "run_model.py"), "msprobe", model, level, out, mode, str(steps),
                    task, json.dumps(block or {})], check=True, capture_output=True, timeout=600)
    return out


def tbprobe_dump(tmp_path, model, level, mode="statistics", steps=1, task="statistics", block=None):
    """tbprobe's dump of the same run; returns the dump folder."""
    d = tmp_path / f"tb_{model}_{level}_{mode}_{task}"
    d.mkdir()
    dbg = make_debugger(d, level=level, summary_mode=mode, steps=steps, task=task, **(block or {}))
    train(dbg, model, steps)
    dbg.close()
    return str(d / "dump")


def visualize(out_dir, debug, bench=None):
    os.makedirs(out_dir)
    cmd = [PEER_MSPROBE, "graph_visualize", "-tp", debug, "-o", out_dir]
    if bench:
        cmd += ["-gp", bench]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    dbs = glob.glob(os.path.join(out_dir, "*.vis.db"))
    assert proc.returncode == 0 and len(dbs) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return dbs[0]


def nodes(db, side="NPU"):
    return vis_nodes(db, ("precision_index", "matched_node_link"), side)


def test_graph_visualize_builds_same_graph_as_from_msprobe_dump(tmp_path):
    need_peers()
    ms = msprobe_dump(tmp_path, "gpt", "mix")
    tb = tbprobe_dump(tmp_path, "gpt", "mix")
    ms_nodes = nodes(visualize(str(tmp_path / "vis_ms"), ms))
    tb_nodes = nodes(visualize(str(tmp_path / "vis_tb"), tb))
    assert len(tb_nodes) > 100
    assert set(tb_nodes) == set(ms_nodes)


def test_graph_visualize_reads_steps_that_share_linked_files(tmp_path):
    """Later steps' stack/construct/dataflow files are hard links to the first step's (writer.py): msprobe builds
    every step from them."""
    need_peers()
    dump = tbprobe_dump(tmp_path, "mlp", "L0", steps=3)
    (r2,) = rank_dirs(dump, 2)
    assert os.stat(os.path.join(r2, "construct.json")).st_nlink == 3
    con = sqlite3.connect(visualize(str(tmp_path / "vis"), dump))
    try:
        per_step = dict(con.execute("SELECT step, count(*) FROM tb_nodes GROUP BY step").fetchall())
    finally:
        con.close()
    assert sorted(per_step) == [0, 1, 2] and len(set(per_step.values())) == 1 and per_step[0] > 5


def test_graph_visualize_compares_tbprobe_against_msprobe(tmp_path):
    need_peers()
    ms = msprobe_dump(tmp_path, "mlp", "mix")
    tb = tbprobe_dump(tmp_path, "mlp", "mix")
    result = nodes(visualize(str(tmp_path / "vis_cmp"), tb, ms))
    matched = {n: v for n, v in result.items() if v[1] not in ("[]", "", None)}
    # the same seeded model: every node is matched and passes
    assert len(matched) == len(result)
    scored = [v[0] for v in matched.values() if v[0] is not None]
    assert scored and all(p == 0 for p in scored)


@pytest.mark.parametrize("mode", ["md5", "xor"])
def test_checksums_equal_msprobe(tmp_path, mode):
    need_peers()
    ms = load_rank(rank_dirs(msprobe_dump(tmp_path, "mlp", "L1", mode))[0])["dump"]["data"]
    tb = load_rank(rank_dirs(tbprobe_dump(tmp_path, "mlp", "L1", mode))[0])["dump"]["data"]
    compared = 0
    for name, entry in ms.items():
        if not name.endswith(".forward"):
            continue
        ins = entry["input_args"]
        if name.split(".")[1].endswith("_"):
            # in-place call: msprobe sometimes takes the input's checksum after the mutation (its input md5 then
            # equals its output md5 while its Max/Min are the values before), so only the output is compared
            ins = []
        for a, b in zip(ins + entry["output"], (tb[name]["input_args"] if ins else []) + tb[name]["output"]):
            if isinstance(a, dict) and "md5" in a:
                assert a["md5"] == b["md5"], name
                compared += 1
    assert compared > 10


def test_extra_keys_are_ignored_by_msprobe(tmp_path):
    """nan/inf/zero counts are in tbprobe's items; msprobe's build still succeeds and shows the four stats."""
    need_peers()
    tb = tbprobe_dump(tmp_path, "mlp", "L0")
    item = json.load(open(os.path.join(rank_dirs(tb)[0], "dump.json")))["data"]["Module.fc1.Linear.forward.0"]
    assert "zero_count" in item["output"][0]
    db = visualize(str(tmp_path / "vis"), tb)
    con = sqlite3.connect(db)
    (out,) = con.execute("SELECT output_data FROM tb_nodes WHERE node_name='Module.fc1.Linear.forward.0'").fetchone()
    con.close()
    assert "Max" in out


def test_msprobe_compare_accepts_tbprobe_dump(tmp_path):
    """`msprobe compare` (the statistics table) of tbprobe's dump against msprobe's dump of the same model."""
    import csv

    need_peers()
    ms = msprobe_dump(tmp_path, "gpt", "mix")
    tb = tbprobe_dump(tmp_path, "gpt", "mix")
    out = str(tmp_path / "cmp")
    proc = subprocess.run([PEER_MSPROBE, "compare", "-tp", os.path.join(tb, "step0"), "-gp", os.path.join(ms, "step0"),
                           "-o", out], capture_output=True, text=True, timeout=600)
    (table,) = glob.glob(os.path.join(out, "*.csv"))
    assert proc.returncode == 0
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) > 300
    assert {r["Result"] for r in rows} == {"pass"}


def test_a_list_of_model_chunks_gives_msprobes_nodes(tmp_path):
    """start(model=[chunk0, chunk1]), as Megatron's virtual pipeline calls it: the same records and construct as
    msprobe's dump of the same chunks."""
    need_peers()
    ms = load_rank(rank_dirs(msprobe_dump(tmp_path, "chunks", "L0"))[0])
    tb = load_rank(rank_dirs(tbprobe_dump(tmp_path, "chunks", "L0"))[0])
    assert set(tb["dump"]["data"]) == set(ms["dump"]["data"])
    assert "Module.1.1.Linear.forward.0" in tb["dump"]["data"]
    assert tb["construct"] == ms["construct"]


_DEBUG_SCRIPT = """
import json, os, sys
import torch
from {module} import PrecisionDebugger
out = sys.argv[1]
cfg = {{"task": "statistics", "dump_path": out, "rank": [], "step": [0], "level": "debug", "async_dump": False,
       "statistics": {{"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}}}
with open(out + "_config.json", "w") as f:
    json.dump(cfg, f)
dbg = PrecisionDebugger(config_path=out + "_config.json")
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
h = w * 2
dbg.save({{"a": h, "k": 3, "c": torch.ones(2), "l": [h * 3, 7]}}, "mixed")
dbg.save(torch.ones(2), "nograd")
dbg.save(5, "scalar")
dbg.save(w, "leaf")
dbg.save(h, "kept", save_backward=False)
(h ** 2).sum().backward()
dbg.save(h, "late")
dbg.step()
"""


def _strip_extras(v):
    if isinstance(v, dict):
        return {k: _strip_extras(x) for k, x in v.items() if k not in ("zero_count", "nan_count", "inf_count")}
    if isinstance(v, list):
        return [_strip_extras(x) for x in v]
    return v


def test_debug_level_matches_msprobes_debug_json(tmp_path):
    """The same save() calls under both tools: the same debug.json entries, structures and statistics (tbprobe's
    extra counts aside)."""
    need_peers()
    docs = {}
    for tool, python, module in (("ms", PEER_PYTHON, "msprobe.pytorch"), ("tb", sys.executable, "tbprobe")):
        script = tmp_path / f"{tool}_debug.py"
        script.write_text(_DEBUG_SCRIPT.format(module=module))
        out = str(tmp_path / f"{tool}_dump")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(HERE)))
        subprocess.run([python, str(script), out], check=True, capture_output=True, timeout=600, env=env)
        (rank,) = rank_dirs(out)
        assert sorted(os.listdir(rank)) == ["debug.json"], tool
        with open(os.path.join(rank, "debug.json")) as f:
            docs[tool] = json.load(f)
    assert list(docs["tb"]["data"]) == list(docs["ms"]["data"])
    assert _strip_extras(docs["tb"]["data"]) == docs["ms"]["data"]      # the same statistics, to the bit


def _items(value, path=""):
    """(path, item) of every tensor or scalar item inside a dump.json entry."""
    if isinstance(value, dict):
        if "type" in value and ("Max" in value or "value" in value):
            yield path, value
            return
        for k, v in value.items():
            yield from _items(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _items(v, f"{path}[{i}]")


def _nulls(value, path=""):
    """The paths of the nulls inside a dump.json entry, as _items names them."""
    if value is None:
        yield path
    elif isinstance(value, dict) and not ("type" in value and ("Max" in value or "value" in value)):
        for k, v in value.items():
            yield from _nulls(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nulls(v, f"{path}[{i}]")


def _same_statistic(field, ours, theirs, dtype):
    if field in ("Mean", "Norm") and theirs is None and dtype in ("torch.bfloat16", "torch.float16", "torch.int64",
                                                                  "torch.int32", "torch.bool"):
        return True   # msprobe writes null where tbprobe computes them (docs/compatibility.md)
    if isinstance(ours, float) and isinstance(theirs, float):
        if ours == theirs or (ours != ours and theirs != theirs):   # (equal infinities; NaN on both sides)
            return True
        # bfloat16/float16 Mean and Norm: tbprobe's unrounded float32 against msprobe's rounded value
        rel = 1e-2 if field in ("Mean", "Norm") and dtype in ("torch.bfloat16", "torch.float16") else 1e-5
        return abs(ours - theirs) <= rel * max(1.0, abs(theirs))
    return ours == theirs


_TRAIN_FRAME = r"run_model\.py, line \d+, in train,"


@pytest.mark.parametrize("model", ["llama", "hf-llama", "hf-gpt2", "hf-mixtral"])
def test_statistics_equal_msprobes_on_the_llama_with_adamw_and_clipping(tmp_path, model):
    """Every statistic of every record, step after step, on an LLM-shaped model: parameter gradients, in-place
    work on 0-dim tensors (AdamW's step count), calls that return their input, the clipping's norms; on
    transformers' own Llama, GPT-2 and Mixtral (top-2 routing) too, whose attention masks are built under
    torch.vmap (BatchedTensor items) and torch._dynamo's TransformGetItemToIndex mode. And every record's stack."""
    need_peers()
    if model.startswith("hf-") and not have_transformers():
        pytest.skip(f"transformers is not installed under {HF_PATH} (bash scripts/hf_deps.sh; make test does it)")
    ms = msprobe_dump(tmp_path, model, "mix", steps=2)
    tb = tbprobe_dump(tmp_path, model, "mix", steps=2)
    for step in (0, 1):
        their_rank, our_rank = load_rank(rank_dirs(ms, step)[0]), load_rank(rank_dirs(tb, step)[0])
        theirs, ours = their_rank["dump"]["data"], our_rank["dump"]["data"]
        assert set(ours) == set(theirs)
        # (up to run_model.py's train(): msprobe runs run_model.py in a process of its own, tbprobe runs train()
        # inside pytest)
        their_stacks = stack_lines(their_rank["stack"], until=_TRAIN_FRAME)
        our_stacks = stack_lines(our_rank["stack"], until=_TRAIN_FRAME)
        assert len(our_stacks) > 50 and our_stacks.keys() == their_stacks.keys()
        differ = [n for n in our_stacks if our_stacks[n] != their_stacks[n]]
        assert not differ, (differ[:3], our_stacks[differ[0]], their_stacks[differ[0]])
        compared, wrong = 0, []
        for name, entry in ours.items():
            mine, ref = dict(_items(entry)), dict(_items(theirs[name]))
            # a gradient one tool writes where the other writes null (before session 14, the router logits of
            # Mixtral's MoE blocks, used inside the block and by nothing after it)
            nulls, ref_nulls = set(_nulls(entry)), set(_nulls(theirs[name]))
            wrong.extend((name, path, "null", path in nulls, path in ref_nulls)
                         for path in (nulls & set(ref)) | (ref_nulls & set(mine)))
            for path in set(mine) & set(ref):
                compared += 1
                for field in ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "value"):
                    if not _same_statistic(field, mine[path].get(field), ref[path].get(field), mine[path].get("dtype")):
                        wrong.append((name, path, field, mine[path].get(field), ref[path].get(field)))
        assert compared > 1000 and wrong == []


def test_tensor_task_saves_the_files_msprobe_saves_with_the_same_tensors(tmp_path):
    """task "tensor" on the Llama at mix: the same file names under dump_tensor_data (keyword arguments under
    `.kwargs.`, parameter gradients under their record's index) holding equal tensors, and data_name pointing at
    them."""
    need_peers()
    out = msprobe_dump(tmp_path, "llama", "mix", task="tensor")
    theirs_dir = os.path.join(rank_dirs(out)[0], "dump_tensor_data")
    ours_rank = rank_dirs(tbprobe_dump(tmp_path, "llama", "mix", task="tensor"))[0]
    ours_dir = os.path.join(ours_rank, "dump_tensor_data")
    theirs, ours = set(os.listdir(theirs_dir)), set(os.listdir(ours_dir))
    # the one difference: the input gradients of a module called with keyword arguments only, which msprobe's full
    # backward hook never sees (docs/compatibility.md)
    assert len(theirs) > 500 and theirs - ours == set()
    assert ours - theirs == {f"Module.layers.{i}.self_attn.Attention.backward.0.output.0.pt" for i in (0, 1)}
    ours &= theirs
    import torch
    for name in sorted(ours):
        a = torch.load(os.path.join(ours_dir, name))
        b = torch.load(os.path.join(theirs_dir, name))
        if torch.equal(a, b):
            continue
        # msprobe's full backward hooks put a Function between each module and its inputs, which sums the module's
        # gradient contributions before they join the others: its run's gradients are re-summed in another order
        # (docs/compatibility.md), where tbprobe's are the plain run's (test_training_unchanged), and so is what follows
        # from them (the clipping's norms, the optimizer's step). The model's forward pass is equal bit for bit.
        assert not (name.startswith("Module.") and ".forward." in name), name
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-8), name
    named = {i["data_name"] for e in load_rank(ours_rank)["dump"]["data"].values() for _, i in _items(e)
             if "data_name" in i}
    assert named >= ours and len(named - ours) == 2


def test_graph_visualize_compares_a_structure_dump_of_tbprobe_with_msprobes(tmp_path):
    need_peers()
    out = msprobe_dump(tmp_path, "llama", "mix", task="structure")
    ours = tbprobe_dump(tmp_path, "llama", "mix", task="structure")
    cmd = [PEER_MSPROBE, "graph_visualize", "-tp", ours, "-gp", out, "-o", str(tmp_path / "vis")]
    os.makedirs(tmp_path / "vis")
    # (msprobe hangs when a worker of its compare fails: a time limit, not a hung test run)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    dbs = glob.glob(str(tmp_path / "vis" / "*.vis.db"))
    assert proc.returncode == 0 and len(dbs) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    npu = nodes(dbs[0])
    # every forward node matched; msprobe leaves some backward nodes of kwargs-only modules apart (their parents
    # differ: docs/compatibility.md)
    unmatched = [n for n, (_, link) in npu.items() if (not link or link == "[]") and ".backward" not in n]
    assert len(npu) > 400 and len(unmatched) <= 1, unmatched[:5]   # (the root may stand alone)


FILTERS = [   # (level, task block): scopes of modules, operators and backward calls, lists of names and of modules
    ("mix", {"scope": ["Module.layers.0.DecoderLayer.forward.0", "Module.layers.1.self_attn.Attention.forward.0"]}),
    ("L1", {"scope": ["Functional.linear.2.forward", "Tensor.__mul__.6.forward"]}),
    ("mix", {"scope": ["Module.layers.1.DecoderLayer.backward.0", "Module.layers.0.DecoderLayer.backward.0"]}),
    ("mix", {"scope": ["Module.layers.1.DecoderLayer.forward.0", "Module.layers.1.DecoderLayer.backward.0"]}),
    ("L0", {"scope": ["Module.layers.0.DecoderLayer.forward.0", "Module.layers.1.DecoderLayer.forward.0"]}),
    ("L0", {"scope": ["Module.layers.1.DecoderLayer.backward.0", "Module.layers.0.DecoderLayer.backward.0"]}),
    # (a range opening with the last module inside another, on the same autograd node: the one around it, whose
    # backward begins first and ends after the range, is not in it)
    ("L0", {"scope": ["Module.layers.1.mlp.down_proj.Linear.backward.0",
                      "Module.layers.1.mlp.gate_proj.Linear.backward.0"]}),
    ("mix", {"scope": ["Module.layers.1.mlp.down_proj.Linear.backward.0",
                       "Module.layers.1.mlp.gate_proj.Linear.backward.0"]}),
    ("mix", {"list": ["Module.layers.1.mlp"]}),
    # a listed backward record keeps its parameters_grad; the module around it (SwiGLU ends on down_proj's node)
    # is not inside it
    ("mix", {"list": ["Module.layers.1.mlp.down_proj.Linear.backward.0", "Module.embed_tokens.Embedding.backward.0"]}),
    ("L1", {"list": ["linear", "silu"], "data_mode": ["forward"]}),
    ("mix", {"data_mode": ["input"]}),
    ("mix", {"data_mode": ["backward", "output"]}),
    ("L0", {"data_mode": ["backward"]}),
    ("L1", {"data_mode": ["backward"]}),
]


@pytest.mark.parametrize("level, block", FILTERS, ids=[f"{lv}-{'-'.join(b)}-{i}" for i, (lv, b) in enumerate(FILTERS)])
def test_scope_and_list_select_the_records_msprobe_selects(tmp_path, level, block):
    """A range is opened by its first call's start and closed by its second call's end, forward and backward
    alike; at mix a listed module keeps what runs inside it; data_mode keeps the records' sides msprobe keeps."""
    need_peers()
    theirs_rank = load_rank(rank_dirs(msprobe_dump(tmp_path, "llama", level, block=block))[0])
    ours_rank = load_rank(rank_dirs(tbprobe_dump(tmp_path, "llama", level, block=block))[0])
    theirs, ours = theirs_rank["dump"]["data"], ours_rank["dump"]["data"]
    assert len(theirs) >= 5 and set(ours) == set(theirs)
    # stack.json has the calls the filters select, also those data_mode leaves without data (["backward"]: the
    # forward calls)
    stacked = [{n for names, _ in r["stack"].values() for n in names} for r in (ours_rank, theirs_rank)]
    assert stacked[0] == stacked[1]
    backward_only = ".backward." in block.get("scope", [""])[0] or (
        block.get("list") and all(".backward." in n for n in block["list"]))
    assert len(stacked[1]) > 5 or backward_only   # (backward calls have no stack)
    # the same keys in every record (data_mode's input/output leave the other side out), but for the calls that
    # are running when a range closes (its last call, the modules around it): msprobe asks its scope again for
    # their outputs and finds it closed, so it keeps their inputs alone; tbprobe keeps them whole
    differ = {n for n in ours if list(ours[n]) != list(theirs[n])}
    for n in differ:
        assert "scope" in block and list(theirs[n]) == ["input_args", "input_kwargs"], (n, list(ours[n]))
        assert list(ours[n])[:3] == ["input_args", "input_kwargs", "output"], n
    assert len(differ) <= 2


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_records_come_in_msprobes_order(tmp_path, model):
    """dump.json's records in the order msprobe writes them: a module's parameter gradients before its backward
    record, but where none of its inputs needs a gradient (the first layer), which is complete before its own
    nodes run. msprobe's Attention of the Llama, called with keywords only, fires as soon as its output's gradient
    comes, with no gradient of its inputs (docs/compatibility.md): tbprobe's waits for them."""
    need_peers()
    theirs = list(load_rank(rank_dirs(msprobe_dump(tmp_path, model, "L0"))[0])["dump"]["data"])
    ours = list(load_rank(rank_dirs(tbprobe_dump(tmp_path, model, "L0"))[0])["dump"]["data"])
    assert len(theirs) > 40 and sorted(ours) == sorted(theirs)
    kwargs_only = [n for n in theirs if ".self_attn.Attention.backward." in n]
    assert (len(kwargs_only) == 2) == (model == "llama")
    assert [n for n in ours if n not in kwargs_only] == [n for n in theirs if n not in kwargs_only]


def test_a_custom_functions_view_as_is_msprobes_node_under_the_same_parent(tmp_path):
    """The view autograd makes of the input a copy-to-region Function returns: msprobe records Tensor.view_as under
    the column-parallel layer that applied it, tbprobe now the same node under the same parent; neither records
    the view of a user's full backward hook."""
    need_peers()
    ms = load_rank(rank_dirs(msprobe_dump(tmp_path, "tp", "mix"))[0])["construct"]
    tb = load_rank(rank_dirs(tbprobe_dump(tmp_path, "tp", "mix"))[0])["construct"]
    views = {n: p for n, p in ms.items() if "view_as" in n}
    assert views == {"Tensor.view_as.0.forward": "Module.fc1.ColumnLinear.forward.0",
                     "Tensor.view_as.1.forward": "Module.fc2.ColumnLinear.forward.0"}
    assert {n: p for n, p in tb.items() if "view_as" in n} == views
