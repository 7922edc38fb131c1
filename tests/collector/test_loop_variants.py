"""The collector on training loops whose step is more than forward/backward/step (patterns_run.py's LOOPS): LBFGS
with a closure, fp16 autocast with a GradScaler that skips a step, distillation from a frozen teacher, an EMA copy,
gradient clipping with foreach/fused AdamW, a packed LSTM, torch.func (functional_call, vmap(grad)), shapes and
forward paths changing by step, modules left None or made in forward, a sparse embedding with SparseAdam. Each
trains as the plain run does, bit for bit, with no hook error and no warning, and writes dumps the graph builder
reads, with the records the reference writes (found by session 28)."""
import json
import logging
import os
import re
import warnings

import pytest
import torch
from conftest import need_peers, rank_dirs
from patterns_run import LOOPS, config, train
from test_training_patterns import _same_training, _steps, peer_dumps

from tbprobe import PrecisionDebugger

HERE = os.path.dirname(os.path.abspath(__file__))


def _collected(tmp_path, pattern, level, caplog, steps=2, summary_mode="statistics"):
    """[(dump data, construct)] of each step of `pattern` collected at `level`, after checking that the training
    is the plain run's, no hook error was counted and tbprobe logged no warning."""
    plain = train(None, pattern, steps)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(str(tmp_path / "dump"), level, steps, summary_mode)))
    with caplog.at_level(logging.WARNING, logger="tbprobe"), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        dbg = PrecisionDebugger(config_path=str(path))
        probed = train(dbg, pattern, steps)
        dbg.close()
    assert dbg.hook_errors == 0
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("tbprobe")]
    assert not [str(w.message) for w in warned]      # (the plain run warns of nothing either)
    _same_training(plain, probed)
    for step in range(steps):
        (rank_dir,) = rank_dirs(str(tmp_path / "dump"), step)
        assert {"dump.json", "construct.json", "stack.json"} <= set(os.listdir(rank_dir))
    return _steps(tmp_path, steps)


def _names(data, pattern):
    return sorted(k for k in data if re.fullmatch(pattern, k))


def _modules(data):
    return {re.sub(r"\.(forward|backward|parameters_grad)(\.\d+)?$", "", k) for k in data if k.startswith("Module.")}


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
@pytest.mark.parametrize("pattern", sorted(LOOPS))
def test_loop_variant_trains_unchanged_and_dumps(tmp_path, caplog, pattern, level):
    """Every variant at every level: bitwise the plain run, no hook error or warning, complete step folders, a
    graph built of them; modules with forward and backward records and parameters_grad at L0 and mix, operators
    at L1 and mix."""
    for data, _ in _collected(tmp_path, pattern, level, caplog):
        if level != "L1":
            assert any(".backward." in k for k in data if k.startswith("Module."))
            assert any(".parameters_grad." in k for k in data)
        if level != "L0":
            assert any(re.fullmatch(r"(Functional|Tensor|Torch|VF)\..+\.\d+\.forward", k) for k in data)
        else:
            assert all(k.startswith("Module.") for k in data)


def test_md5_summary_mode(tmp_path, caplog):
    """summary_mode md5 on a variant that meets sparse gradients, GradTrackingTensors and an optimizer: every
    tensor item has its checksum."""
    for pattern in ("sparse", "func"):
        sub = tmp_path / pattern
        sub.mkdir()
        for data, _ in _collected(sub, pattern, "mix", caplog, summary_mode="md5"):
            items = [v for rec in data.values() for v in _leaves(rec) if isinstance(v, dict) and "dtype" in v]
            assert items and all(re.fullmatch(r"[0-9a-f]{8}", v["md5"]) for v in items)


def _leaves(x):
    if isinstance(x, dict) and "type" in x:
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from _leaves(v)


# --- per variant -----------------------------------------------------------------------------------------------

def test_lbfgs_closure_calls_are_numbered_and_hang_under_their_modules(tmp_path, caplog):
    """LBFGS evaluates its closure several times in one step(): forward.i, backward.i and parameters_grad.i for
    each evaluation; at mix the closure's operators hang under the modules, LBFGS's own under `optimizer`."""
    for data, construct in _collected(tmp_path, "lbfgs", "mix", caplog):
        n = len(_names(data, r"Module\.fc1\.Linear\.forward\.\d+"))
        assert n >= 2
        for mod in ("fc1.Linear", "act.Tanh", "fc2.Linear"):
            for d in ("forward", "backward"):
                assert _names(data, rf"Module\.{re.escape(mod)}\.{d}\.\d+") == sorted(
                    f"Module.{mod}.{d}.{i}" for i in range(n))
        assert len(_names(data, r"Module\.fc2\.Linear\.parameters_grad\.\d+")) == n
        assert construct["Functional.linear.0.forward"] == "Module.fc1.Linear.forward.0"
        assert construct["Module.fc1.Linear.forward.1"] is None
        assert construct["optimizer"] is None
        assert any(p == "optimizer" for p in construct.values())


def test_grad_scaler_step_skipped_on_inf(tmp_path, caplog):
    """fp16 autocast with a GradScaler whose first scale overflows: step 0's gradients are infinite and its
    optimizer step is skipped (no optimizer calls, no optimizer node), step 1's are finite and stepped."""
    (d0, c0), (d1, c1) = _collected(tmp_path, "scaler", "mix", caplog)
    g0 = d0["Module.fc.Linear.parameters_grad.0"]["weight"][0]
    g1 = d1["Module.fc.Linear.parameters_grad.0"]["weight"][0]
    assert g0["inf_count"] + g0["nan_count"] > 0 and g1["inf_count"] == g1["nan_count"] == 0
    assert d0["Module.fc.Linear.forward.0"]["output"][0]["dtype"] == "torch.float16"
    assert "optimizer" not in c0 and "optimizer" in c1
    assert "clip_grad" in c0 and "clip_grad" in c1


@pytest.mark.parametrize("both", [False, True])
def test_distillation_teacher_under_no_grad(tmp_path, caplog, both):
    """start(model=student): the teacher is no module of the model (not recorded at L0, its operators recorded
    at mix, with no backward); start(model=[student, teacher]): the teacher's modules are `Module.1.*`, with
    forward records alone."""
    for data, _ in _collected(tmp_path, "distill-both" if both else "distill", "mix", caplog):
        student = "Module.0." if both else "Module."
        assert f"{student}fc1.Linear.parameters_grad.0" in data and f"{student}fc2.Linear.backward.0" in data
        teacher = sorted(k for k in data if k.startswith("Module.1."))
        if both:
            assert teacher == ["Module.1.0.Linear.forward.0", "Module.1.1.ReLU.forward.0",
                               "Module.1.2.Dropout.forward.0", "Module.1.3.Linear.forward.0"]
        else:
            assert teacher == [] and _modules(data) == {"Module.fc1.Linear", "Module.act.Tanh", "Module.fc2.Linear"}
        # two teacher linears without backward, two student linears with one each
        assert len(_names(data, r"Functional\.linear\.\d+\.forward")) == 4
        assert len(_names(data, r"Functional\.linear\.\d+\.backward")) == 2


def test_ema_copy_is_not_recorded_and_its_lerps_are(tmp_path, caplog):
    for data, _ in _collected(tmp_path, "ema", "mix", caplog):
        assert _modules(data) == {"Module.fc1.Linear", "Module.act.Tanh", "Module.fc2.Linear"}
        assert len(_names(data, r"Module\.fc1\.Linear\.forward\.\d+")) == 1     # the copy's forward is not the model's
        assert _names(data, r"Tensor\.lerp_\.\d+\.forward") == ["Tensor.lerp_.0.forward", "Tensor.lerp_.1.forward"]
        assert not any("foreach_lerp" in k for k in data)     # (the reference records no _foreach_* but the norm)


@pytest.mark.parametrize("kind", ["foreach", "fused"])
def test_clipping_and_foreach_or_fused_adamw(tmp_path, caplog, kind):
    """clip_grad_norm_(foreach=True)'s calls hang under clip_grad; a fused AdamW step is one call,
    Torch._fused_adamw_, under optimizer; a foreach one makes no recorded call, and so has no optimizer node
    (tbprobe wrote an empty one, which msprobe's construct.json does not have)."""
    for data, construct in _collected(tmp_path, f"adamw-{kind}", "mix", caplog):
        assert construct["Torch._foreach_norm.0.forward"] == "clip_grad"
        under = sorted(k for k, p in construct.items() if p == "optimizer")
        assert under == (["Torch._fused_adamw_.0.forward"] if kind == "fused" else [])
        assert ("optimizer" in construct) == bool(under)
        assert [k for k in under if k not in data] == []


def test_empty_pseudo_nodes_are_not_written(tmp_path):
    """clip_grad_value_ and an SGD step with foreach=True make no recorded call: construct.json has no clip_grad
    nor optimizer node, as msprobe's (checked against it), where tbprobe wrote both with no child."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, foreach=True)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="mix", step=[0])
    dbg.start(model=m)
    m(torch.randn(3, 4)).sum().backward()
    torch.nn.utils.clip_grad_value_(m.parameters(), 0.1, foreach=True)
    opt.step()
    dbg.stop()
    dbg.step()
    dbg.close()
    (data, construct), = _steps(tmp_path, 1)
    assert "clip_grad" not in construct and "optimizer" not in construct
    assert "Module.Linear.backward.0" not in data and "Functional.linear.0.backward" in data


def test_packed_lstm_output_is_a_packed_sequence(tmp_path, caplog):
    for data, _ in _collected(tmp_path, "packed-lstm", "L0", caplog):
        fw = data["Module.lstm.LSTM.forward.0"]
        assert set(fw["input_args"][0]) == {"data", "batch_sizes", "sorted_indices", "unsorted_indices"}
        packed, (h, c) = fw["output"]
        assert packed["data"]["shape"] == [11, 5] and h["shape"] == c["shape"] == [1, 3, 5]
        bw = data["Module.lstm.LSTM.backward.0"]["input"]
        # the gradients of the output's data, of h (the head reads h[-1]) and of c (unused: null)
        assert bw[0]["shape"] == [11, 5] and bw[1]["shape"] == [1, 3, 5] and bw[2] is None
        assert data["Module.lstm.LSTM.backward.0"]["output"][0]["shape"] == [11, 6]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_torch_func_keeps_the_parameters_gradients(tmp_path, caplog, level):
    """functional_call(model, params) trains the model; vmap(grad(functional_call(model, detached))) runs its
    forward again before the loss's backward. That forward's end saw plain tensors in the parameters' slots,
    took them for a change and moved the parameter hooks onto them: the real backward had no parameters_grad.
    Now every step has them, holding the gradient the optimizer used."""
    for data, _ in _collected(tmp_path, "func", level, caplog):
        for mod in ("fc1", "fc2"):
            assert _names(data, rf"Module\.{mod}\.Linear\.parameters_grad\.\d+") == [
                f"Module.{mod}.Linear.parameters_grad.0"]
            for i in (0, 1):
                assert f"Module.{mod}.Linear.backward.{i}" in data
        per_sample = data["Module.fc1.Linear.forward.1"]["input_args"][0]
        assert per_sample["type"] == "GradTrackingTensor" and per_sample["shape"] == [4, 1, 8]
        assert data["Module.fc1.Linear.forward.1"]["parameters"]["weight"]["type"] == "GradTrackingTensor"


def test_torch_func_parameters_grad_is_the_gradient(tmp_path):
    torch.manual_seed(0)
    model, _ = train(None, "func", 0)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    from torch.func import functional_call, grad, vmap

    x, y = torch.randn(4, 8), torch.randn(4, 2)
    dbg.start(model=model)
    loss = torch.nn.functional.mse_loss(model(x), y)
    detached = {k: v.detach() for k, v in model.named_parameters()}
    vmap(grad(lambda p, xi: functional_call(model, p, (xi,)).sum()), in_dims=(None, 0))(detached, x)
    loss.backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    (data, _), = _steps(tmp_path, 1)
    item = data["Module.fc2.Linear.parameters_grad.0"]["weight"][0]
    g = model.fc2.weight.grad
    assert item["Max"] == g.max().item() and item["Min"] == g.min().item()


def test_shapes_and_paths_changing_by_step(tmp_path, caplog):
    (d0, _), (d1, _) = _collected(tmp_path, "varlen", "mix", caplog)
    assert d0["Module.emb.Embedding.forward.0"]["input_args"][0]["shape"] == [2, 3]
    assert d1["Module.emb.Embedding.forward.0"]["input_args"][0]["shape"] == [2, 5]
    assert "Module.a.Linear.backward.0" in d0 and not any(k.startswith("Module.b.") for k in d0)
    assert "Module.b.Linear.parameters_grad.0" in d1 and not any(k.startswith("Module.a.") for k in d1)
    assert "Tensor.relu.0.forward" in d1 and "Tensor.relu.0.forward" not in d0


def test_none_submodules_and_modules_made_in_forward(tmp_path, caplog):
    """Submodules left None are no nodes; modules made inside forward are not the model's, so not recorded (as
    in the reference), while their operators are, under the model's root (at the top)."""
    for data, construct in _collected(tmp_path, "unregistered", "mix", caplog):
        assert _modules(data) == {"Module.fc.Linear", "Module.head.Linear"}
        assert len(_names(data, r"Functional\.linear\.\d+\.forward")) == 3
        assert construct["Functional.gelu.0.forward"] is None


def test_sparse_embedding_with_sparse_adam(tmp_path, caplog):
    for data, _ in _collected(tmp_path, "sparse", "mix", caplog):
        g = data["Module.emb.Embedding.parameters_grad.0"]["weight"][0]
        assert g["shape"] == [20, 6] and g["Max"] is not None and g["zero_count"] >= 6 * 8
        assert "Functional.embedding.0.backward" in data


# --- against the reference -------------------------------------------------------------------------------------

@pytest.mark.peers
@pytest.mark.parametrize("pattern, level", [("lbfgs", "L0"), ("scaler", "mix"), ("scaler-noclip", "L1"),
                                            ("distill-both", "mix"), ("ema", "L1"), ("adamw-foreach", "mix"),
                                            ("adamw-fused", "mix"), ("varlen", "mix"), ("unregistered", "mix")])
def test_record_names_equal_msprobes(tmp_path, pattern, level):
    """msprobe's dump of the same loop has the same records in the same order, and construct.json the same nodes
    (its parents differ only as docs/compatibility.md says). msprobe cannot run the func and sparse variants (it
    raises on a GradTrackingTensor's and a sparse gradient's data pointer), and records no VF.lstm."""
    need_peers()
    dumps = peer_dumps(tmp_path, pattern, level)
    assert dumps["tbprobe"] == dumps["msprobe"]
