"""Operator records at L1 and mix: their names and counters (torch, Tensor methods, dunders), an in-place call's
input as it was before, which autograd node an operator's backward record is (a call returning its input, one
node per output, a first output needing no gradient, a second output getting none, an in-place call on a
module's input), and where calls hang in construct.json (under clip_grad, optimizer, and the module whose
backward runs them)."""
import json

import pytest
import torch
from conftest import dump_of, make_debugger
from run_model import build, train

from tbprobe import PrecisionDebugger


def test_l1_writes_empty_construct_and_operator_names(tmp_path):
    dbg = make_debugger(tmp_path, level="L1")
    train(dbg, "mlp", 1)
    dbg.close()
    r = dump_of(tmp_path)
    assert r["construct"] == {}
    names = list(r["dump"]["data"])
    assert names[:2] == ["Functional.linear.0.forward", "Functional.relu.0.forward"]
    assert "Functional.linear.0.backward" in names and "Functional.mse_loss.0.backward" in names
    assert not any(n.startswith("Module.") for n in names)


def test_operator_counters_dunders_and_inplace_input_before_mutation(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.ones(3, requires_grad=True)
    dbg.start()
    y = x + 1                  # Tensor.__add__
    z = y.add(1)               # Tensor.add
    w = torch.matmul(z, z)     # Torch.matmul
    h = z * 1.0
    h.mul_(3.0)                # in-place: input recorded as it was before
    (w + h.sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    for name in ("Tensor.__add__.0.forward", "Tensor.add.0.forward", "Torch.matmul.0.forward",
                 "Tensor.__mul__.0.forward", "Tensor.mul_.0.forward", "Tensor.__add__.1.forward",
                 "Torch.matmul.0.backward", "Tensor.mul_.0.backward"):
        assert name in data, name
    mul = data["Tensor.mul_.0.forward"]
    assert mul["input_args"][0]["Max"] == 3.0 and mul["output"][0]["Max"] == 9.0
    assert data["Torch.matmul.0.forward"]["output"][0]["Max"] == 27.0
    assert "Tensor.sum.0.forward" in data and "Tensor.backward.0.forward" not in data


def test_a_call_returning_its_input_has_the_producers_backward_but_dropout_p0_has_none(tmp_path):
    # as the reference records them: x.float() of a float32 x returns x, and its backward is the node that made x
    # (here the matmul's); dropout with p=0 returns its input too, and has no backward record at all
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "L1",
                               "step": [0], "risk_level": "ALL"}))
    dbg = PrecisionDebugger(config_path=str(cfg))
    a = torch.ones(2, 2, requires_grad=True)
    dbg.start()
    y = torch.matmul(a, a)
    z = torch.nn.functional.dropout(y.float(), p=0.0)
    (z * 2).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert "Functional.dropout.0.forward" in data and "Functional.dropout.0.backward" not in data
    assert data["Tensor.float.0.backward"] == data["Torch.matmul.0.backward"]
    assert data["Tensor.float.0.backward"]["input"][0]["Max"] == 2.0   # d(2z)/dz reaching the matmul's node


def test_an_operator_with_one_node_per_output_gets_its_first_output_s_backward(tmp_path):
    """tensor_split (and MultiheadAttention's output and weights) gives each output a node of its own: the
    backward record joined every node's gradients in the order the engine reached them (input.0 was output 2's
    gradient). As msprobe, it is the first output's node's: its gradient in, its inputs' out (checked against
    msprobe's dump of the same calls)."""
    dbg = make_debugger(tmp_path, level="L1", risk_level="ALL")
    x = torch.arange(6.0, requires_grad=True)
    mha = torch.nn.MultiheadAttention(4, 2)
    q = torch.randn(3, 1, 4)
    dbg.start()
    a, b, c = x.tensor_split(3)
    (a * 5 + b * 7 + c).sum().backward()
    o, w = mha(q, q, q)
    (o.sum() + (w * w).sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    split = data["Tensor.tensor_split.0.backward"]
    assert [i["Max"] for i in split["input"]] == [5.0] and [i["shape"] for i in split["output"]] == [[6]]
    attn = data["Functional.multi_head_attention_forward.0.backward"]
    assert [i["shape"] for i in attn["input"]] == [[3, 1, 4]]


def test_an_operator_whose_first_output_needs_no_gradient_has_no_backward_record(tmp_path):
    """broadcast_tensors of an int index and float logits (what Categorical.log_prob calls) got a backward
    record from its second output's node: the logits' producer's node when no expansion was needed (another call's
    gradients, in its count and places), the expansion's otherwise. msprobe hooks the first output alone, which
    needs no gradient: no record. A call whose first output needs one keeps its record."""
    dbg = make_debugger(tmp_path, level="L1", risk_level="ALL")
    f = torch.randn(4, 4, requires_grad=True)
    col = torch.randn(4, 1, requires_grad=True)
    dbg.start()
    logits = torch.mul(f, 3)
    idx, same = torch.broadcast_tensors(torch.zeros(4, 1, dtype=torch.long), logits)   # no expansion
    _, wide = torch.broadcast_tensors(torch.ones(4, 4), col)                           # an expansion
    kept, _ = torch.broadcast_tensors(col, torch.ones(4, 4))                           # first output needs one
    (same.sum() + wide.sum() + kept.sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert "Torch.broadcast_tensors.0.forward" in data and "Torch.broadcast_tensors.1.forward" in data
    assert "Torch.broadcast_tensors.0.backward" not in data and "Torch.broadcast_tensors.1.backward" not in data
    kept_bw = data["Torch.broadcast_tensors.2.backward"]   # the expansion of col: its gradient in, col's out
    assert [(i["shape"], i["Max"]) for i in kept_bw["input"]] == [([4, 4], 1.0)]
    assert [(i["shape"], i["Max"]) for i in kept_bw["output"]] == [([4, 1], 4.0)]
    assert data["Torch.mul.0.backward"]["input"][0]["Max"] == 1.0


def test_gradient_clipping_hangs_under_clip_grad_and_is_put_back(tmp_path):
    original = torch.nn.utils.clip_grad_norm_
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    model, data, loss_fn = build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg.start(model=model)
    loss_fn(model(data[0][0]), data[0][1]).backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert torch.nn.utils.clip_grad_norm_ is original and torch.nn.utils.clip_grad.clip_grad_norm_ is original
    assert float(total) > 0.5   # (the clipping really ran: the norm it returns is the one before clipping)
    construct = dump_of(tmp_path)["construct"]
    assert construct["clip_grad"] is None and construct["optimizer"] is None
    clipping = [k for k, v in construct.items() if v == "clip_grad"]
    assert clipping and all(k.startswith(("Torch.", "Tensor.")) for k in clipping)
    assert "Torch._foreach_norm.0.forward" in clipping
    assert not any(construct[k] == "clip_grad" for k in construct if k.startswith("Module."))
    assert any(v == "optimizer" for v in construct.values())


def test_an_in_place_call_on_a_modules_input_records_its_own_backward(tmp_path):
    """At mix, ReLU(inplace=True)'s F.relu returns the module's input, changed: its backward is its own node's
    (the gradient after the mask), not the module's share of the input as for a call that returns its input as it
    is (`x.float()`)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True), torch.nn.Linear(4, 1))
    x = torch.randn(8, 4)
    dbg = make_debugger(tmp_path, level="mix", summary_mode="statistics")
    with dbg.collect(net):
        net(x).sum().backward()
    dbg.close()
    rec = dump_of(tmp_path)["dump"]["data"]["Functional.relu.0.backward"]
    h = net[0](x)
    h.retain_grad()
    r = torch.relu(h)
    r.retain_grad()
    net[2](r).sum().backward()
    assert rec["input"][0]["Norm"] == pytest.approx(r.grad.norm().item(), rel=1e-6)
    assert rec["output"][0]["Norm"] == pytest.approx(h.grad.norm().item(), rel=1e-6)
    assert h.grad.norm() != r.grad.norm()


def test_an_operator_whose_second_output_gets_no_gradient_keeps_its_backward_record(tmp_path):
    """F.multi_head_attention_forward returns the attention output and weights; with the weights unused only the
    output's node runs in backward. The record comes at the step's end with the gradients that came, as the
    reference has it (it was missing: the record waited for both nodes)."""
    torch.manual_seed(0)
    att = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(4, 5, 8)
    dbg = make_debugger(tmp_path, level="mix", summary_mode="statistics")
    with dbg.collect(att):
        out, _weights = att(x, x, x)
        out.sum().backward()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    rec = data["Functional.multi_head_attention_forward.0.backward"]
    assert [i["shape"] for i in rec["input"]] == [[5, 4, 8]]        # the output's gradient (sequence first)
    assert rec["input"][0]["Norm"] > 0 and len(rec["output"]) == 1


class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return torch.mul(grad, 2.0)   # a tensor-parallel layer's all_reduce, say


class _Col(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(_CopyToRegion.apply(x))


def test_calls_in_a_backward_and_in_an_optimizers_closure_hang_under_the_module_that_runs(tmp_path):
    """A custom Function's backward (tensor parallelism's copy-to-region all_reduce) ran its calls at the top of
    the graph: they hang under the module whose backward runs, as in the reference. LBFGS's closure runs the
    model inside optimizer.step(): its modules' calls hung under "optimizer", and the modules too."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Col())
    opt = torch.optim.LBFGS(model.parameters(), max_iter=1)
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    dbg.start(model=model)
    x = torch.randn(2, 4)
    model(x).sum().backward()

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    dbg.stop()
    dbg.step()
    dbg.close()
    construct = dump_of(tmp_path)["construct"]
    assert construct["Torch.mul.0.forward"] == "Module.1._Col.backward.0"
    assert construct["Module.0.Linear.forward.1"] is None
    assert construct["Functional.linear.2.forward"] == "Module.0.Linear.forward.1"
    assert any(parent == "optimizer" for parent in construct.values())   # the step's own operators


class _RowRegion(torch.nn.Module):
    """A row-parallel layer: its reduce region's backward calls torch, and its output is its caller's output."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _CopyToRegion.apply(self.fc(x))


class _Mlp(torch.nn.Module):   # Megatron's ParallelMLP: returns its RowParallelLinear's output as it is
    def __init__(self):
        super().__init__()
        self.row = _RowRegion()

    def forward(self, x):
        return self.row(x)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = _Mlp()

    def forward(self, x):
        return self.mlp(x)


def test_calls_in_an_inner_modules_backward_hang_under_it_when_its_output_is_the_outer_ones(tmp_path):
    """Modules ending on one autograd node (an inner module's output returned as it is by the modules around it)
    begin their backward on that node's gradient, the inner one first: the outermost went on top of the open
    backwards and the inner one's calls (a reduce region's collective) hung under it. As the reference: under the
    innermost, at any depth."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Block())
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    with dbg.collect(model):
        model(torch.randn(2, 4)).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    construct = dump_of(tmp_path)["construct"]
    assert construct["Torch.mul.0.forward"] == "Module.1.mlp.row._RowRegion.backward.0"
    assert construct["Module.1.mlp.row._RowRegion.backward.0"] == "Module.1.mlp._Mlp.backward.0"
    assert construct["Module.1.mlp._Mlp.backward.0"] == "Module.1._Block.backward.0"
