"""The collector on the training patterns users have (patterns_run.py): activation checkpointing, gradient
accumulation, eval passes inside and between steps (no_grad, inference_mode), modules called twice or returning
dicts, namedtuples, dataclasses or None, bf16 autocast, model chunks sharing a module, a module replaced between
steps, and misuse of the API. Each run trains as the plain run does, bit for bit, writes dumps that tbprobe's
formats and graph builder read, and has the records the reference names."""
import json
import logging
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import PEER_PYTHON, need_peers, rank_dirs, stack_lines
from patterns_run import build, config, train

from tbprobe import PrecisionDebugger
from tbprobe.formats.dump_json import load_dump
from tbprobe.graph_builder import run_graph

HERE = os.path.dirname(os.path.abspath(__file__))


def _debugger(tmp_path, level, steps=2):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(str(tmp_path / "dump"), level, steps)))
    return PrecisionDebugger(config_path=str(path))


def _same_training(plain, probed):
    (m0, l0), (m1, l1) = plain, probed
    assert len(l0) == len(l1)
    for a, b in zip(l0, l1):
        assert torch.equal(a, b)
    for (n, p), (_, q) in zip(m0.state_dict().items(), m1.state_dict().items()):
        assert torch.equal(p, q), n


def _steps(tmp_path, steps=2):
    """[(dump data, construct)] per step, each dump.json read by tbprobe's formats as well, and the dump built into
    a graph by the graph builder."""
    out = []
    for step in range(steps):
        dirs = rank_dirs(str(tmp_path / "dump"), step)
        assert len(dirs) == 1, step
        with open(os.path.join(dirs[0], "dump.json")) as f:
            data = json.load(f)["data"]
        with open(os.path.join(dirs[0], "construct.json")) as f:
            construct = json.load(f)
        assert set(load_dump(os.path.join(dirs[0], "dump.json")).entries) == set(data)
        out.append((data, construct))
    result = run_graph(str(tmp_path / "dump"), None, str(tmp_path / "graph"), parallel=False, progress=False)
    assert result.summary["graphs"] == steps and result.summary["nodes"] > 0
    return out


def _collected(tmp_path, pattern, level, steps=2):
    plain = train(None, pattern, steps)
    dbg = _debugger(tmp_path, level, steps)
    probed = train(dbg, pattern, steps)
    dbg.close()
    assert dbg.hook_errors == 0
    _same_training(plain, probed)
    return _steps(tmp_path, steps)


def _names(data, pattern):
    return sorted(k for k in data if re.fullmatch(pattern, k))


# --- activation checkpointing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_activation_checkpointing(tmp_path, reentrant, level):
    """The recomputed forward is the module's second call (forward.1), each module has one backward, and the
    block's parameters one parameters_grad, in every step. The backward is of the call whose graph autograd
    runs: the first (non-reentrant: the recomputation only refills its saved tensors) or the recomputed one
    (reentrant: the first ran without grad), as the reference numbers them."""
    pattern = "checkpoint-reentrant" if reentrant else "checkpoint"
    k = 1 if reentrant else 0
    for data, construct in _collected(tmp_path, pattern, level):
        for b in (0, 1):
            for inner in ("fc.Linear", "act.GELU", "fc2.Linear"):
                base = f"Module.blocks.{b}.{inner}"
                assert _names(data, re.escape(base) + r"\.forward\.\d+") == [f"{base}.forward.0",
                                                                               f"{base}.forward.1"]
                assert _names(data, re.escape(base) + r"\.backward\.\d+") == [f"{base}.backward.{k}"]
            for lin in ("fc", "fc2"):
                assert _names(data, rf"Module\.blocks\.{b}\.{lin}\.Linear\.parameters_grad.*") == [
                    f"Module.blocks.{b}.{lin}.Linear.parameters_grad.0"]
            # non-reentrant: the recomputation hangs under the backward call that unpacked a saved tensor;
            # reentrant: at the top level, as in the reference (the graph builder re-attaches it)
            parent = construct[f"Module.blocks.{b}.Block.forward.1"]
            assert (parent is None) if reentrant else parent.startswith(f"Module.blocks.{b}.")
            assert _names(data, rf"Module\.blocks\.{b}\.Block\.backward\.\d+") == [f"Module.blocks.{b}.Block.backward.{k}"]
        assert _names(data, r"Module\.head\.Linear\..*") == [
            "Module.head.Linear.backward.0", "Module.head.Linear.forward.0", "Module.head.Linear.parameters_grad.0"]
        if level == "mix":
            # two linear forwards of each block's first pass, and again in its recomputation, plus the head's
            assert len(_names(data, r"Functional\.linear\.\d+\.forward")) == 9


# --- gradient accumulation -------------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["L0", "mix"])
def test_gradient_accumulation_records_each_micro_batch(tmp_path, level):
    """Three forward/backward passes a step: forward.0-2 and backward.0-2 of each module, parameters_grad.0-2 (one
    per backward, as the reference writes them), the last of them the gradient the optimizer used: the sum of the
    three."""
    for data, _ in _collected(tmp_path, "accumulate", level):
        for mod in ("0.Linear", "1.ReLU", "2.Linear"):
            for d in ("forward", "backward"):
                assert _names(data, rf"Module\.{re.escape(mod)}\.{d}\.\d+") == [
                    f"Module.{mod}.{d}.{i}" for i in range(3)]
        for mod in ("0.Linear", "2.Linear"):
            assert _names(data, rf"Module\.{re.escape(mod)}\.parameters_grad.*") == [
                f"Module.{mod}.parameters_grad.{i}" for i in range(3)]
        grads = [data[f"Module.2.Linear.parameters_grad.{i}"]["weight"][0]["Norm"] for i in range(3)]
        assert len(set(grads)) == 3       # accumulated: each pass's sum differs from the last


def test_gradient_accumulation_last_parameters_grad_is_the_optimizers(tmp_path):
    model, opt, batches, loss_fn, _ = build("accumulate")
    dbg = _debugger(tmp_path, "L0", 1)
    dbg.start(model=model)
    for x in batches[0]:
        loss_fn(model, x).backward()
    used = model[2].weight.grad.clone()
    opt.step()
    dbg.stop()
    dbg.step()
    dbg.close()
    (data, _), = _steps(tmp_path, 1)
    item = data["Module.2.Linear.parameters_grad.2"]["weight"][0]
    assert item["Max"] == used.max().item() and item["Min"] == used.min().item()
    assert item["Norm"] == pytest.approx(used.norm().item(), rel=1e-6)


# --- eval passes -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_eval_passes_inside_and_between_steps(tmp_path, level):
    """A no_grad and an inference_mode forward inside the collected window are calls 1 and 2 of each module,
    with no backward of their own; the inference_mode pass between steps, outside the window, records nothing."""
    for data, _ in _collected(tmp_path, "eval", level):
        if level != "L1":
            for mod in ("0.Linear", "1.ReLU", "2.Linear"):
                assert _names(data, rf"Module\.{re.escape(mod)}\.forward\.\d+") == [
                    f"Module.{mod}.forward.{i}" for i in range(3)]
                assert _names(data, rf"Module\.{re.escape(mod)}\.backward\.\d+") == [f"Module.{mod}.backward.0"]
            # inference tensors (no version counter, never saved for backward) are summarised as any other
            out = data["Module.2.Linear.forward.2"]["output"][0]
            assert out["shape"] == [2, 2] and out["requires_grad"] is False and out["Max"] is not None
        if level != "L0":
            assert len(_names(data, r"Functional\.linear\.\d+\.forward")) == 6
            assert len(_names(data, r"Functional\.linear\.\d+\.backward")) == 2


# --- call patterns ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["L0", "mix"])
def test_modules_called_twice_tied_kwargs_and_structured_outputs(tmp_path, level):
    for data, construct in _collected(tmp_path, "calls", level):
        # two micro-batches, the shared module called twice in each forward
        assert _names(data, r"Module\.shared\.Linear\.forward\.\d+") == [
            f"Module.shared.Linear.forward.{i}" for i in range(4)]
        assert _names(data, r"Module\.shared\.Linear\.backward\.\d+") == [
            f"Module.shared.Linear.backward.{i}" for i in range(4)]
        assert _names(data, r"Module\.shared\.Linear\.parameters_grad.*") == [
            "Module.shared.Linear.parameters_grad.0", "Module.shared.Linear.parameters_grad.1"]
        # tied weights: each layer's parameters_grad holds the one shared gradient
        for i in (0, 1):
            a = data[f"Module.tied.Linear.parameters_grad.{i}"]["weight"][0]
            b = data[f"Module.tied2.Linear.parameters_grad.{i}"]["weight"][0]
            assert a == b
        kw = data["Module.kw.KwargsOnly.forward.0"]
        assert kw["input_args"] == [] and set(kw["input_kwargs"]) == {"x", "scale"}
        assert kw["input_kwargs"]["scale"] == {"type": "float", "value": 0.5}
        assert kw["output"][0]["none"] is None and kw["output"][0]["y"]["shape"] == [4, 8]
        assert "Module.kw.KwargsOnly.backward.0" in data
        nt = data["Module.nt.TupleOut.forward.0"]["output"]
        assert set(nt) == {"y", "aux"} and nt["aux"]["shape"] == []
        dc = data["Module.dc.DataclassOut.forward.0"]["output"][0]
        assert set(dc) == {"y", "aux"}
        assert len(data["Module.dc.DataclassOut.backward.0"]["input"]) == 2
        assert data["Module.none.ReturnsNone.forward.0"]["output"] == [None]
        assert "Module.none.ReturnsNone.backward.0" not in data
        assert construct["Module.kw.fc.Linear.forward.0"] == "Module.kw.KwargsOnly.forward.0"


# --- autocast --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_bf16_autocast(tmp_path, level):
    for data, _ in _collected(tmp_path, "autocast", level):
        if level != "L1":
            assert data["Module.fc.Linear.forward.0"]["output"][0]["dtype"] == "torch.bfloat16"
            assert data["Module.ln.LayerNorm.forward.0"]["output"][0]["dtype"] == "torch.float32"
            assert data["Module.fc.Linear.parameters_grad.0"]["weight"][0]["dtype"] == "torch.float32"
        if level != "L0":
            assert data["Functional.linear.0.forward"]["output"][0]["dtype"] == "torch.bfloat16"


# --- functionals taken before the collector starts -------------------------------------------------------------

@pytest.mark.parametrize("level", ["L1", "mix"])
def test_a_functional_taken_before_start_records_the_calls_inside_it(tmp_path, level):
    """nn.TransformerEncoderLayer's F.relu and F.softmax / F.layer_norm / F.normalize called through references taken
    before start(): the calls inside them (Torch.relu, Tensor.softmax, Torch.layer_norm, Tensor.norm ...), as the
    reference records them; F.relu called through F stays Functional.relu; F.gelu, a C function whose inside neither
    tool names, stays Functional.gelu. F.max_pool1d and F.adaptive_max_pool1d (torch's dispatchers on
    return_indices) taken before start() are the calls inside the function they pick (Torch.max_pool1d,
    Torch.adaptive_max_pool1d); F.max_pool1d(h, 2, return_indices=True) through F is Functional.max_pool1d (not
    the Functional.max_pool1d_with_indices it dispatches to). Training stays bitwise the plain run's (_collected),
    and F's attributes are the originals again once the collector is closed."""
    originals = {n: getattr(torch.nn.functional, n) for n in ("relu", "softmax", "layer_norm", "normalize",
                                                              "max_pool1d", "max_pool1d_with_indices")}
    for data, _ in _collected(tmp_path, "taken", level):
        forwards = [k.rsplit(".", 2)[0] for k in data if k.endswith(".forward") and not k.startswith("Module.")]
        assert forwards.count("Torch.relu") == 1            # the encoder layer's feed-forward
        assert forwards.count("Functional.relu") == 1       # F.relu(h) in TakenFunctionals.forward
        for name in ("Tensor.softmax", "Torch.layer_norm", "Tensor.norm", "Tensor.clamp_min", "Functional.gelu"):
            assert forwards.count(name) == 1, name
        for name in ("Functional.softmax", "Functional.normalize"):
            assert name not in forwards
        # F.layer_norm through F (the encoder layer's LayerNorm modules) is still Functional.layer_norm
        assert forwards.count("Functional.layer_norm") == 2
        for name in ("Torch.max_pool1d", "Torch.adaptive_max_pool1d", "Functional.max_pool1d"):
            assert forwards.count(name) == 1, name
        assert not [n for n in forwards if n.endswith("_with_indices")], forwards
        pooled = data["Functional.max_pool1d.0.forward"]
        assert pooled["input_kwargs"]["return_indices"]["value"] is True
        assert [o["dtype"] for o in pooled["output"]] == ["torch.float32", "torch.int64"]
        assert data["Torch.max_pool1d.0.forward"]["output"][0]["shape"] == [2, 3, 4]
        relu = data["Torch.relu.0.forward"]
        assert relu["input_args"][0]["shape"] == [2, 3, 16] and relu["output"][0]["Min"] >= 0
        assert "Torch.relu.0.backward" in data
        if level == "mix":
            assert "Module.enc.TransformerEncoderLayer.forward.0" in data
    for name, fn in originals.items():
        assert getattr(torch.nn.functional, name) is fn, name


def test_functionals_are_wrapped_only_while_a_step_is_collected(tmp_path):
    """F.relu is tbprobe's wrapper between start() and stop() alone: an nn.TransformerEncoderLayer built between two
    collected steps sees F.relu itself and keeps its fast path (`activation is F.relu`)."""
    relu = torch.nn.functional.relu
    model, opt, batches, loss_fn, _ = build("taken")
    dbg = _debugger(tmp_path, "L1", 2)
    for step in range(2):
        dbg.start(model=model)
        assert torch.nn.functional.relu is not relu
        loss_fn(model, batches[step][0]).backward()
        dbg.stop()
        assert torch.nn.functional.relu is relu
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        assert layer.activation_relu_or_gelu == 1
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0


# --- model chunks that share a module; a module replaced between steps ---------------------------------------

@pytest.mark.parametrize("level", ["L0", "mix"])
def test_model_chunks_sharing_a_module(tmp_path, level, caplog):
    """start(model=[first, last]) where the last chunk ties its projection to the first's embedding: both chunks
    are recorded, the shared embedding once, under the first chunk's name. The chunks of one list were taken for
    two models sharing modules: each replaced the one before, with a warning at every start(), and the first
    chunk was never recorded."""
    with caplog.at_level(logging.WARNING, logger="tbprobe"):
        steps = _collected(tmp_path, "chunks", level)
    assert not [r for r in caplog.records if "shares modules" in r.getMessage()]
    for data, construct in steps:
        modules = {re.sub(r"\.(forward|backward|parameters_grad)(\.\d+)?$", "", k) for k in data
                   if k.startswith("Module.")}
        assert modules == {"Module.0.emb.Embedding", "Module.0.fc.Linear", "Module.1.fc.Linear"}
        assert "Module.0.emb.Embedding.forward.0" in data and "Module.0.emb.Embedding.forward.1" not in data
        assert "Module.0.fc.Linear.backward.0" in data and "Module.1.fc.Linear.backward.0" in data
        assert "Module.0.emb.Embedding.parameters_grad.0" in data
        assert not any(k.startswith("Module.1.emb.") for k in data)
        assert construct["Module.0.fc.Linear.forward.0"] is None


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_submodule_replaced_between_steps_is_recorded(tmp_path, level):
    """A new head put in place between steps (fine-tuning swaps it, adapters are injected after warm-up) is hooked
    at the next start() under its path's name; the module it replaced is no longer recorded. It was never
    hooked: start() saw a model it knew and checked only its parameters."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    old_head = model[2]
    dbg = _debugger(tmp_path, level, 2)
    for step in range(2):
        if step == 1:
            model[2] = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
        dbg.start(model=model)
        model(torch.randn(3, 4)).sum().backward()
        old_head(torch.randn(2, 4))    # the replaced module, still alive, called outside the model
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    (first, _), (second, construct) = _steps(tmp_path, 2)
    assert "Module.2.Linear.forward.1" in first          # the old head's call outside the model, in step 0
    assert not any(k.startswith("Module.2.Linear.") for k in second)
    for name in ("Module.2.0.Linear.forward.0", "Module.2.1.Linear.forward.0", "Module.2.0.Linear.backward.0",
                 "Module.2.1.Linear.parameters_grad.0", "Module.0.Linear.forward.0", "Module.0.Linear.backward.0"):
        assert name in second, name
    assert construct["Module.2.0.Linear.forward.0"] == "Module.2.Sequential.forward.0"
    assert len([k for k in second if k.startswith("Module.0.Linear.forward")]) == 1


def test_a_model_given_alone_then_in_a_list_of_chunks_is_named_as_a_chunk(tmp_path):
    """start(model=m1), then start(model=[m1, m2]): from then on m1's modules are `Module.0.*`, as if the list had
    been given from the start. m1 kept the names it was hooked with alone, `Module.fc...` beside `Module.1.fc...`."""
    torch.manual_seed(0)
    m1, m2 = torch.nn.Sequential(torch.nn.Linear(4, 4)), torch.nn.Sequential(torch.nn.Linear(4, 4))
    dbg = _debugger(tmp_path, "L0", 3)
    for given in [m1, [m1, m2], m1]:
        dbg.start(model=given)
        m2(m1(torch.randn(2, 4))).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    first, second, third = _steps(tmp_path, 3)
    assert sorted(first[0]) == ["Module.0.Linear.backward.0", "Module.0.Linear.forward.0",
                                "Module.0.Linear.parameters_grad.0"]
    assert sorted(k for k in second[0] if "forward" in k) == ["Module.0.0.Linear.forward.0",
                                                              "Module.1.0.Linear.forward.0"]
    names = set(third[0])
    # m1 alone again: its own names; m2, hooked beside it, keeps its chunk's
    assert {"Module.0.Linear.forward.0", "Module.1.0.Linear.forward.0"} <= names
    assert not any(k.startswith("Module.0.0.") for k in names)


# --- misuse ----------------------------------------------------------------------------------------------------

def _misuse_run(dbg, case, other=None):
    """Three steps of a small MLP with the API misused as `case` says; returns (model, losses)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i in range(3):
        x = torch.randn(3, 4)
        if dbg is not None:
            if case == "stop_before_start":
                dbg.stop()
            if case == "step_before_start" and i == 0:
                dbg.step()
            if case == "close_then_start" and i == 1:
                dbg.close()
            dbg.start(model=model)
            if case in ("start_twice", "close_then_start"):
                dbg.start(model=model)
            if other is not None:
                other.start(model=model)
        try:
            loss = model(x).sum()
            if case == "user_error" and i == 1:
                raise ValueError("the user's own bug")
            loss.backward()
            losses.append(loss.detach().clone())
            opt.step()
        except ValueError:
            pass
        opt.zero_grad()
        if dbg is not None:
            if other is not None:
                other.stop()
                other.step()
            dbg.stop()
            if case == "stop_twice":
                dbg.stop()
            dbg.step()
    return model, losses


@pytest.mark.parametrize("case", ["stop_before_start", "step_before_start", "start_twice", "stop_twice",
                                  "user_error", "close_then_start", "two_debuggers"])
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_api_misuse_never_breaks_training(tmp_path, case, level):
    torch.manual_seed(0)
    plain = _misuse_run(None, case)
    dbg = _debugger(tmp_path, level, 4)
    other = None
    if case == "two_debuggers":
        other = PrecisionDebugger(dump_path=str(tmp_path / "dump2"), level=level)
    probed = _misuse_run(dbg, case, other)
    dbg.close()
    if other is not None:
        other.close()
    assert dbg.hook_errors == 0
    _same_training(plain, probed)
    steps = sorted(int(d[4:]) for d in os.listdir(tmp_path / "dump") if d.startswith("step"))
    expect = {"step_before_start": [1, 2, 3], "close_then_start": [0]}.get(case, [0, 1, 2])
    assert steps == expect
    for step in steps:
        (rank_dir,) = rank_dirs(str(tmp_path / "dump"), step)
        data = load_dump(os.path.join(rank_dir, "dump.json")).entries
        assert "Module.0.Linear.forward.0" in data
        # the step whose loop raised before backward has its forwards and no backward; the others have both
        assert ("Module.0.Linear.backward.0" in data) == (not (case == "user_error" and step == 1))
        assert "Module.0.Linear.forward.1" not in data      # start() twice hooks nothing twice
    run_graph(str(tmp_path / "dump"), None, str(tmp_path / "graph"), parallel=False, progress=False)
    if other is not None:
        assert len(rank_dirs(str(tmp_path / "dump2"), 2)) == 1


def test_start_without_model_at_l0_is_a_clear_error_and_training_goes_on(tmp_path):
    """At L0 a start() without a model is refused at the call with a TbprobeError saying what to give (docs:
    collector.md); a start(model=...) after it collects the step as usual."""
    from tbprobe.errors import TbprobeError

    dbg = _debugger(tmp_path, "L0", 1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with pytest.raises(TbprobeError, match="give the model to start"):
        dbg.start()
    dbg.start(model=model)
    model(torch.ones(2, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    (data, _), = _steps(tmp_path, 1)
    assert "Module.2.Linear.backward.0" in data and dbg.hook_errors == 0


# --- against the reference -------------------------------------------------------------------------------------

def peer_dumps(tmp_path, pattern, level) -> dict:
    """{tool: (record names in order, construct.json's node set, {name: stack.json's lines, each file's path from
    site-packages/ on})} of step 1 of patterns_run.py's `pattern` run at `level` by msprobe (the peers' python)
    and by tbprobe, each in a process of its own."""
    dumps = {}
    for tool, python in (("msprobe", PEER_PYTHON), ("tbprobe", sys.executable)):
        out = str(tmp_path / tool)
        subprocess.run([python, os.path.join(HERE, "patterns_run.py"), tool, pattern, level, out], check=True,
                       capture_output=True, timeout=300)
        (rank_dir,) = rank_dirs(out, 1)
        with open(os.path.join(rank_dir, "dump.json")) as f:
            names = list(json.load(f)["data"])
        with open(os.path.join(rank_dir, "construct.json")) as f:
            nodes = set(json.load(f))
        with open(os.path.join(rank_dir, "stack.json")) as f:
            stacks = stack_lines(json.load(f))
        dumps[tool] = names, nodes, stacks
    return dumps


@pytest.mark.peers
@pytest.mark.parametrize("pattern, level", [("checkpoint-reentrant", "mix"), ("calls", "L1"),
                                            ("autocast", "L0"), ("accumulate", "mix"), ("taken", "L1"),
                                            ("taken", "mix")])
def test_record_names_equal_msprobes(tmp_path, pattern, level):
    """msprobe's dump of the same loop has the same records, in the same order. (Where tbprobe records more by
    design, docs/compatibility.md says so: non-reentrant checkpointing at L1, a dataclass output's backward, a C
    functional called through a reference taken before start(), which msprobe's wrappers never see: the
    "taken" pattern's F.gelu.)"""
    need_peers()
    dumps = peer_dumps(tmp_path, pattern, level)
    ours = [n for n in dumps["tbprobe"][0] if not (pattern == "taken" and n.startswith("Functional.gelu."))]
    assert len(ours) < len(dumps["tbprobe"][0]) or pattern != "taken"
    assert ours == dumps["msprobe"][0]
    # and each call's stack (a call through a reference taken before start() runs its body again: the frames of
    # the first run are left out, as msprobe never sees them)
    theirs = dumps["msprobe"][2]
    differ = [n for n in ours if n in theirs and dumps["tbprobe"][2][n] != theirs[n]]
    assert not differ, (differ[:3], dumps["tbprobe"][2][differ[0]], theirs[differ[0]])
