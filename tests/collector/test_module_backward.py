"""Module backward records: each module's own share of its inputs' gradients and its outputs' gradients, when
they come, checked against autograd's own gradients and the order msprobe's full backward hooks give."""
import math

import pytest
import torch
from conftest import load_rank, make_debugger, rank_dirs


def dump_of(tmp_path, step=0):
    return load_rank(rank_dirs(str(tmp_path / "dump"), step)[0])


def test_module_backward_gradients_of_shared_node_outputs_and_unused_ones(tmp_path):
    """Outputs made by one autograd node (split), one of them unused, an input used twice: each module backward
    record holds the module's own gradients, checked against autograd's (retain_grad on a plain run)."""

    class Split(torch.nn.Module):
        def forward(self, h):
            a, b, c = h.split(2, dim=-1)
            return a, b * 2, c

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)
            self.split = Split()

        def forward(self, x):
            h = self.lin(x)
            a, b, _unused = self.split(h)
            return (a * b).sum() + (h * 3).sum()

    torch.manual_seed(0)
    net, x = Net(), torch.randn(3, 6, requires_grad=True)
    dbg = make_debugger(tmp_path, level="L0", summary_mode="statistics")
    dbg.start(model=net)
    net(x).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    # the same computation by hand, gradients kept
    h = net.lin(x)
    h.retain_grad()
    hs = h.view_as(h)      # the split module's own share of h's gradient
    hs.retain_grad()
    a, b, _unused = hs.split(2, dim=-1)
    b2 = b * 2
    for t in (a, b2):
        t.retain_grad()
    ((a * b2).sum() + (h * 3).sum()).backward()
    rec = data["Module.split.Split.backward.0"]
    assert [i and i["Max"] for i in rec["input"]] == [pytest.approx(a.grad.max().item()),
                                                       pytest.approx(b2.grad.max().item()), None]
    assert rec["output"][0]["Norm"] == pytest.approx(hs.grad.norm().item(), rel=1e-6)
    lin = data["Module.lin.Linear.backward.0"]
    assert lin["input"][0]["Norm"] == pytest.approx(h.grad.norm().item(), rel=1e-6)


class _Router(torch.nn.Module):
    """An MoE router's shape: the logits are used inside (the routing weights) and returned (for an auxiliary
    loss), as transformers' Mixtral block returns them."""

    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(6, 3)

    def forward(self, h):
        logits = self.gate(h)
        return h * logits.sigmoid().mean(-1, keepdim=True), logits


class _Routed(torch.nn.Module):
    def __init__(self, aux: str):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.router = _Router()
        self.aux = aux

    def forward(self, x):
        y, logits = self.router(self.lin(x))
        loss = y.sum()
        if self.aux in ("one", "two"):
            loss = loss + (logits ** 2).mean()           # a consumer after the call
        if self.aux == "two":
            loss = loss + logits.exp().sum() * 0.5       # and another
        return loss


@pytest.mark.parametrize("aux, level", [("none", "L0"), ("one", "L0"), ("two", "L0"), ("two", "mix")])
def test_an_output_the_module_also_uses_has_the_gradient_of_what_comes_after(tmp_path, aux, level):
    """A module output the module consumes itself (router logits): its backward "input" is what the consumers after
    the call send, as the reference's identity node after each output reports it, not the sum with the module's own
    use; null when nothing after the call uses it. The training's gradients are untouched, and torch's
    autograd.backward is put back when the step ends."""
    torch.manual_seed(0)
    net, x = _Routed(aux), torch.randn(4, 6)
    backward = torch.autograd.backward
    dbg = make_debugger(tmp_path, level=level, summary_mode="statistics")
    with dbg.collect(net):
        net(x).backward()
    dbg.close()
    assert dbg.hook_errors == 0 and torch.autograd.backward is backward
    collected = [p.grad.clone() for p in net.parameters()]
    data = dump_of(tmp_path)["dump"]["data"]
    rec = data["Module.router._Router.backward.0"]
    # the same computation by hand: the logits' gradient from the consumers after the call alone, through an
    # identity in front of them
    net.zero_grad()
    y, logits = net.router(net.lin(x))
    logits.retain_grad()
    after = logits.view_as(logits)
    after.retain_grad()
    loss = y.sum()
    if aux in ("one", "two"):
        loss = loss + (after ** 2).mean()
    if aux == "two":
        loss = loss + after.exp().sum() * 0.5
    loss.backward()
    if aux == "none":
        assert rec["input"][1] is None
    else:
        assert rec["input"][1]["Norm"] == pytest.approx(after.grad.norm().item(), rel=1e-6)
        assert rec["input"][1]["Max"] == pytest.approx(after.grad.max().item(), rel=1e-6)
    # the gate's output is the same tensor, but the router's use of it comes after the gate's call: every
    # consumer's sum
    gate = data["Module.router.gate.Linear.backward.0"]
    assert gate["input"][0]["Norm"] == pytest.approx(logits.grad.norm().item(), rel=1e-6)
    # the training's own gradients, bit for bit (a plain run: no tool, no identity)
    net.zero_grad()
    net(x).backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(collected, net.parameters()))


class _Bias(torch.nn.Module):
    """T5's later blocks: the position bias comes in, is used, and goes out as it is for the next block."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, h, bias):
        return self.lin(h) + bias, bias


def test_an_input_returned_as_it_came_has_the_gradient_of_what_comes_after(tmp_path):
    """The returned bias's backward "input" is what the consumers after the call send (here the second block's
    use), not also the first block's own use or the use before the call, as the reference reports it."""
    torch.manual_seed(0)
    a, b = _Bias(), _Bias()
    x, w = torch.randn(4, 6), torch.randn(4, 6, requires_grad=True)

    def run(blocks):
        bias = w * 2
        pre = (bias ** 2).sum()                     # a use before the blocks
        h, bias1 = blocks[0](x, bias)
        h, _ = blocks[1](h, bias1)
        return h, bias, pre

    dbg = make_debugger(tmp_path, level="L0", summary_mode="statistics")
    model = torch.nn.ModuleList([a, b])
    with dbg.collect(model):
        h, _, pre = run(model)
        (h.sum() + pre).backward()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    first = data["Module.0._Bias.backward.0"]
    # by hand: the bias after the first block, through an identity, receives only the second block's use
    h0, bias1 = a(x, w * 2)
    after = bias1.view_as(bias1)
    after.retain_grad()
    b(h0, after)[0].sum().backward()
    assert first["input"][1]["Norm"] == pytest.approx(after.grad.norm().item(), rel=1e-6)
    assert data["Module.1._Bias.backward.0"]["input"][1] is None       # nothing uses the last block's


def test_a_module_that_changes_a_view_input_in_place_has_a_null_input_gradient(tmp_path):
    """ReLU(inplace=True) on a slice: its input's gradient goes to the slice's base past the slice's own node
    (_cgrad's hook_consumers), so the share is not known and is null, not the gradient of the changed value; an
    identity module still gets its input's gradient; the training's gradients are untouched."""

    class Same(torch.nn.Module):
        def forward(self, t):
            return t

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 8)
            self.act = torch.nn.ReLU(inplace=True)
            self.same = Same()

        def forward(self, x):
            h = self.lin(x)
            return (self.act(h[:, :4]) * self.same(h[:, 4:])).sum()

    torch.manual_seed(0)
    net, x = Net(), torch.randn(3, 4)
    dbg = make_debugger(tmp_path, level="L0", summary_mode="statistics")
    with dbg.collect(net):
        net(x).backward()
    dbg.close()
    assert dbg.hook_errors == 0
    collected = net.lin.weight.grad.clone()
    data = dump_of(tmp_path)["dump"]["data"]
    assert data["Module.act.ReLU.backward.0"]["output"] == [None]
    assert data["Module.act.ReLU.backward.0"]["input"][0]["shape"] == [3, 4]
    net.zero_grad()
    h = net.lin(x)
    h.retain_grad()
    right = h[:, 4:]
    right.retain_grad()
    (torch.relu(h[:, :4]) * right).sum().backward()
    assert torch.equal(collected, net.lin.weight.grad)
    same = data["Module.same.Same.backward.0"]
    assert same["output"][0]["Norm"] == pytest.approx(right.grad.norm().item(), rel=1e-6)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_two_backward_passes_through_one_graph_record_the_last(tmp_path, level):
    """retain_graph: the same graph backpropagated twice (two losses one after the other, a gradient penalty's
    autograd.grad before the backward). Each backward record is gathered again in the second pass and written
    over the first, as the reference keeps the last pass, the one the optimizer's gradients come from; each pass
    has its own parameters_grad record. Before, the records kept the first pass."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(5, 4), torch.randn(5, 3)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    out = model(x)
    seen = []
    out.register_hook(lambda g: seen.append(g.clone()))
    torch.nn.functional.mse_loss(out, y).backward(retain_graph=True)
    first = model[2].weight.grad.clone()
    (10 * out.pow(2).mean()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    last = seen[1]
    assert not torch.allclose(seen[0], last)
    got = data["Module.2.Linear.backward.0"]["input"][0]
    assert got["Norm"] == pytest.approx(last.norm().item(), rel=1e-6) and got["Max"] == last.max().item()
    # the module's share of its input's gradient (read off its own nodes, _cgrad's shares) is the second pass's
    share = data["Module.2.Linear.backward.0"]["output"][0]
    assert share["Norm"] == pytest.approx((last @ model[2].weight).norm().item(), rel=1e-5)
    assert data["Module.2.Linear.parameters_grad.0"]["weight"][0]["Norm"] == pytest.approx(first.norm().item(),
                                                                                       rel=1e-6)
    assert data["Module.2.Linear.parameters_grad.1"]["weight"][0]["Norm"] == pytest.approx(
        model[2].weight.grad.norm().item(), rel=1e-6)
    if level == "mix":
        op = data["Functional.linear.1.backward"]["input"][0]
        assert op["Norm"] == pytest.approx(last.norm().item(), rel=1e-6)


class _TwoOutputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h * 2, h * 3


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_record_left_incomplete_by_one_pass_is_gathered_anew_in_the_next(tmp_path, level):
    """Two losses backpropagated one after the other, each from one of a module's two outputs: the first pass
    brings one output's gradient, the second the other's. The module's record is the last pass's, as the
    reference's (the other output's gradient null), not a mix of the two passes. Before, it held both."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(_TwoOutputs())      # (the root module has no record of its own)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    a, b = model(torch.randn(3, 4))
    grads = []
    b.register_hook(lambda g: grads.append(g.clone()))
    a.sum().backward(retain_graph=True)
    (b * 5).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    first, second = data["Module.0._TwoOutputs.backward.0"]["input"]
    assert first is None
    assert second["Norm"] == pytest.approx(grads[0].norm().item(), rel=1e-6)
    # the inner Linear's record is complete in both passes: the second's (its gradient from b alone)
    got = data["Module.0.fc.Linear.backward.0"]["input"][0]
    assert got["Norm"] == pytest.approx((grads[0] * 3).norm().item(), rel=1e-6)


def test_a_module_whose_extra_outputs_get_no_gradient_completes_with_its_inputs(tmp_path):
    """An LSTM's (h, c) get no gradient when only its output is used: its record waited for them and was written
    at the step's end, so the backward records came in forward order; they come in completion order now, as in
    the reference (the first LSTM, whose input needs no gradient, waits for its outputs)."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = torch.nn.LSTM(4, 4), torch.nn.LSTM(4, 4), torch.nn.LSTM(4, 4)

        def forward(self, x):
            for m in (self.a, self.b, self.c):
                x, _ = m(x)
            return x

    model = torch.nn.Sequential(Net())
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    model(torch.randn(3, 2, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    order = [k for k in data if k.endswith("LSTM.backward.0")]
    assert order == ["Module.0.c.LSTM.backward.0", "Module.0.b.LSTM.backward.0", "Module.0.a.LSTM.backward.0"]
    hc = data["Module.0.b.LSTM.backward.0"]["input"]
    assert hc[0] is not None and hc[1:] == [None, None]   # (the gradients of output, h and c)



@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_whose_output_the_loss_does_not_use_has_its_inputs_share_of_the_nodes_that_ran(tmp_path, level):
    """A block returning (mlp(h), aux(h)), the aux head's output unused by the loss (a logging or early-exit head):
    aux's node never runs in the backward pass, so the block's share of h's gradient had one contribution missing
    for good and was null. It is the sum of the contributions that came, handed on when the pass ends (here h's
    whole gradient, mlp being h's only consumer that runs), as msprobe records it."""
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp, self.aux = torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)

        def forward(self, h):
            return self.mlp(h), self.aux(h)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.block, self.head = torch.nn.Linear(8, 8), Block(), torch.nn.Linear(8, 2)

        def forward(self, x):
            h = self.emb(x)
            h.retain_grad()
            self.h = h
            return self.head(self.block(h)[0])

    model = Net()
    dbg = make_debugger(tmp_path, level=level, steps=2)
    norms = []
    for _ in range(2):
        dbg.start(model=model)
        model(torch.randn(4, 8)).sum().backward()
        norms.append(model.h.grad.norm().item())
        dbg.stop()
        dbg.step()
    dbg.close()
    for step in range(2):
        record = dump_of(tmp_path, step)["dump"]["data"]["Module.block.Block.backward.0"]
        assert record["output"][0] is not None, step
        assert math.isclose(record["output"][0]["Norm"], norms[step], rel_tol=1e-6)
        assert record["input"][0] is not None and record["input"][1] is None   # (aux's output: no gradient)
        # complete once the nodes that run have sent theirs, before the layer under it (it was written when the
        # pass ended, after every other record of the pass)
        names = list(dump_of(tmp_path, step)["dump"]["data"])
        assert names.index("Module.block.Block.backward.0") < names.index("Module.emb.Linear.backward.0"), names


def test_a_module_whose_output_is_the_backward_root_has_its_whole_input_share(tmp_path):
    """x * sigmoid(x) run with out.backward(g): the engine starts at the module's own Mul node, which is not among
    the graph task's nodes (no edge reaches a root), so counting the nodes the pass runs missed it and the share
    was handed on with the Mul's part alone (1.93 against 2.20)."""
    torch.manual_seed(0)

    class Swish(torch.nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act = torch.nn.Linear(4, 4), Swish()

        def forward(self, x):
            h = self.fc(x)
            h.retain_grad()
            self.h = h
            return self.act(h)

    model = Net()
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    out = model(torch.randn(3, 4))
    out.backward(torch.ones_like(out))
    dbg.stop()
    dbg.step()
    dbg.close()
    record = dump_of(tmp_path)["dump"]["data"]["Module.act.Swish.backward.0"]
    assert math.isclose(record["output"][0]["Norm"], model.h.grad.norm().item(), rel_tol=1e-6)


@pytest.mark.parametrize("aux", ["of its output", "of its input"])
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_with_a_second_output_computed_inside_and_unused_completes_in_order(tmp_path, level, aux):
    """A module returning (y, tanh(y)) or (y, tanh(2x)), the loss using y alone: its record waited for every
    output's gradient (y is consumed inside too) or for the share of a node that never runs, and came when the
    step or the pass ended, after the layers under it. At mix, with the module listed, its backward region stayed
    open to the step's end and took in the layer under it and the optimizer's calls."""
    torch.manual_seed(0)

    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.a(x)
            return y, (y.tanh() if aux == "of its output" else (x * 2).tanh())

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.pair, self.fc2 = torch.nn.Linear(4, 4), Pair(), torch.nn.Linear(4, 2)

        def forward(self, x):
            h = self.fc1(x).relu()
            h.retain_grad()
            self.h = h
            return self.fc2(self.pair(h)[0])

    def run(d, **block):
        d.mkdir()
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        dbg = make_debugger(d, level=level, steps=1, **block)
        dbg.start(model=model)
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        dbg.stop()
        dbg.step()
        dbg.close()
        return dump_of(d)["dump"]["data"], model.h.grad

    data, h_grad = run(tmp_path / "all")
    names = list(data)
    assert names.index("Module.pair.Pair.backward.0") < names.index("Module.fc1.Linear.backward.0"), names
    record = data["Module.pair.Pair.backward.0"]
    assert record["input"][1] is None and math.isclose(record["output"][0]["Norm"], h_grad.norm().item(),
                                                       rel_tol=1e-6)
    if level == "mix":
        listed, _ = run(tmp_path / "listed", list=["Module.pair"])
        assert not [n for n in listed if "fc1" in n or ".add_." in n or "Functional.relu" in n], list(listed)
        assert "Module.pair.Pair.backward.0" in listed and "Module.pair.a.Linear.parameters_grad.0" in listed



class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_autograds_view_of_an_input_a_custom_function_returns_is_recorded_but_a_full_backward_hooks_is_not(tmp_path):
    """A custom Function that returns its input as it is (a tensor-parallel copy-to-region) gets a view of it from
    autograd, Tensor.view_as through Python's method: msprobe records it (construct-only at mix, as any view_as),
    and so does tbprobe now; it was left out, and each column-parallel layer was one node short of msprobe's dump.
    The view made for a user's full backward hook (its BackwardHookFunction) neither tool records. A view_as the
    user calls is recorded, after the Function's."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model[0].register_full_backward_hook(lambda m, gi, go: None)
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    dbg.start(model=model)
    x = torch.randn(2, 4, requires_grad=True)
    y = _Identity.apply(model(x))
    y.view_as(x).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    rank = dump_of(tmp_path)
    views = sorted(n for n in rank["construct"] if "view_as" in n)
    # (autograd makes its view under no_grad: no backward of its own)
    assert views == ["Tensor.view_as.0.forward", "Tensor.view_as.1.backward", "Tensor.view_as.1.forward"]



def test_a_first_layer_whose_extra_outputs_get_no_gradient_is_recorded_when_its_pass_ends(tmp_path):
    """`o, _ = self.lstm(x)` as the first layer: none of its inputs needs a gradient and its h and c get none, so
    its backward record waited for them until the step's end, after everything done since (at mix, the
    optimizer's calls). It is complete when the backward pass ends now."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.head = torch.nn.LSTM(4, 4), torch.nn.Linear(4, 1)

        def forward(self, x):
            o, _ = self.lstm(x)
            return self.head(o)

    model = Net()
    dbg = make_debugger(tmp_path, level="mix", steps=1)
    dbg.start(model=model)
    model(torch.randn(3, 2, 4)).sum().backward()
    torch.exp(torch.ones(1))              # the next call after the backward pass
    dbg.stop()
    dbg.step()
    dbg.close()
    names = list(dump_of(tmp_path)["dump"]["data"])
    lstm = names.index("Module.lstm.LSTM.backward.0")
    assert names.index("Module.head.Linear.backward.0") < lstm < names.index("Torch.exp.0.forward")
    record = dump_of(tmp_path)["dump"]["data"]["Module.lstm.LSTM.backward.0"]
    assert record["input"][0] is not None and record["output"] == []


class _AuxRouter(torch.nn.Module):
    """An MoE-style router: its load-balancing loss kept in an attribute (as a tensor, or in a list), which the
    model adds to the loss, not returned."""

    def __init__(self, keep):
        super().__init__()
        self.keep, self.fc, self.gate = keep, torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, h):
        aux = self.gate(h).pow(2).mean()
        if self.keep == "tensor":
            self.aux_loss = aux
        else:
            self.aux_losses = [aux]
        return self.fc(h)


@pytest.mark.parametrize("keep", ["tensor", "list"])
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_value_the_module_keeps_in_an_attribute_is_part_of_its_input_share(tmp_path, level, keep):
    """The router's share of h's gradient was what its returned output sends back alone (0.865 for 0.909): the
    nodes that made its kept aux loss were not walked, and the record came before the gate's. It is h's whole
    gradient now (the router is h's only consumer), after the gate's record, as msprobe records it."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.router, self.head = torch.nn.Linear(8, 8), _AuxRouter(keep), torch.nn.Linear(8, 2)

        def forward(self, x):
            h = self.emb(x)
            h.retain_grad()
            self.h = h
            out = self.head(self.router(h)).sum()
            aux = self.router.aux_loss if keep == "tensor" else self.router.aux_losses[0]
            return out + aux

    model = Net()
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    model(torch.randn(4, 8)).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    record = data["Module.router._AuxRouter.backward.0"]
    assert math.isclose(record["output"][0]["Norm"], model.h.grad.norm().item(), rel_tol=1e-6)
    names = list(data)
    assert (names.index("Module.router.gate.Linear.backward.0") < names.index("Module.router._AuxRouter.backward.0")
            < names.index("Module.emb.Linear.backward.0"))


class _UsesItsOutput(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return y, (y * 3).sum()


@pytest.mark.parametrize("how", ["Tensor.backward", "autograd.backward", "autograd.grad"])
def test_a_watched_output_that_is_a_backward_root_gets_the_roots_gradient(tmp_path, how):
    """A module's output that it also uses itself, or that an identity module returns as it is, has the gradient
    the consumers after the call send, which a watch sums; the gradient the pass gives a root comes from no
    consumer, so where the output was itself a root its record was null (msprobe: the root's gradient)."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.uses, self.same = torch.nn.Linear(4, 4), _UsesItsOutput(), torch.nn.Identity()

        def forward(self, x):
            y, s = self.uses(self.fc(x))
            return self.same(y), s

    model = Net()
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    y, s = model(torch.randn(3, 4))
    g = torch.full_like(y, 0.5)
    if how == "Tensor.backward":
        y.backward(g)
    elif how == "autograd.backward":
        torch.autograd.backward([y, s], [g, None])
    else:
        torch.autograd.grad([y, s], [model.fc.weight], grad_outputs=[g, None])
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    same = data["Module.same.Identity.backward.0"]
    assert math.isclose(same["input"][0]["Norm"], g.norm().item(), rel_tol=1e-6)
    assert math.isclose(same["output"][0]["Norm"], g.norm().item(), rel_tol=1e-6)
    uses = data["Module.uses._UsesItsOutput.backward.0"]
    assert math.isclose(uses["input"][0]["Norm"], g.norm().item(), rel_tol=1e-6)
    if how != "Tensor.backward":
        assert uses["input"][1]["Norm"] == 1.0    # (s: ones, as the engine gives a one-element root)


@pytest.mark.parametrize("how", ["backward(inputs=...)", "autograd.grad"])
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_whose_input_gradients_the_pass_does_not_compute_has_no_backward_record(tmp_path, level, how):
    """A pass asked for b's weight alone computes no gradient for b's input: msprobe's full backward hook never
    fires for b (the node after its inputs does not run), where tbprobe wrote a record with a null input
    gradient. b's parameters_grad and c's record stay; a, which the pass does not reach, has none either."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    loss = model(torch.randn(4, 8)).sum()
    if how == "autograd.grad":
        torch.autograd.grad(loss, [model[2].weight])
    else:
        loss.backward(inputs=[model[2].weight])
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    modules = [n for n in data if n.startswith("Module.") and "forward" not in n]
    expected = ["Module.3.Linear.backward.0"] + (["Module.2.Linear.parameters_grad.0"] if how != "autograd.grad"
                                                 else [])
    assert modules == expected
    assert data["Module.3.Linear.backward.0"]["output"][0] is not None


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_identity_modules_one_after_the_other_are_recorded_in_backward_order(tmp_path, level):
    """Identity and Dropout(p=0) after a Linear return what came: their records came in forward order (Identity
    first; at L0 Dropout's after the Linear's parameter gradients), where msprobe's come as their backward runs:
    the later module first, both before the Linear's parameter gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Identity(), torch.nn.Dropout(0.0),
                                torch.nn.Linear(8, 2))
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    x = torch.randn(4, 8, requires_grad=True)
    model(x).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    modules = [n for n in data if n.startswith("Module.") and "forward" not in n]
    assert modules == ["Module.3.Linear.parameters_grad.0", "Module.3.Linear.backward.0",
                       "Module.2.Dropout.backward.0", "Module.1.Identity.backward.0",
                       "Module.0.Linear.parameters_grad.0", "Module.0.Linear.backward.0"]
    norm = data["Module.3.Linear.backward.0"]["output"][0]["Norm"]
    for name in ("Module.2.Dropout.backward.0", "Module.1.Identity.backward.0"):
        assert data[name]["input"][0]["Norm"] == pytest.approx(norm, rel=1e-6)
        assert data[name]["output"][0]["Norm"] == pytest.approx(norm, rel=1e-6)


class _Product(torch.nn.Module):
    def forward(self, a, b):
        return a * b


@pytest.mark.parametrize("block", [{}, {"list": ["Module.pb"]}])
def test_a_module_with_one_input_gradient_computed_keeps_its_record_whatever_the_filter_keeps(tmp_path, block):
    """autograd.grad asks for pb's weight: the pass computes the product's share of b, not of a. The record stays
    (msprobe's hook fires, with a null for a); where a list leaves its data out it is still a construct node. It
    was dropped whole there, taken for a record none of whose input gradients the pass computes."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pa, self.pb, self.two = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), _Product()

        def forward(self, x):
            return self.two(self.pa(x), self.pb(x)).sum()

    model = Net()
    dbg = make_debugger(tmp_path, level="L0", **block)
    dbg.start(model=model)
    torch.autograd.grad(model(torch.randn(3, 4)), [model.pb.weight])
    dbg.stop()
    dbg.step()
    dbg.close()
    rank = dump_of(tmp_path)
    assert "Module.two._Product.backward.0" in rank["construct"]
    record = rank["dump"]["data"].get("Module.two._Product.backward.0")
    if block:
        assert record is None
    else:
        assert record["output"][0] is None and record["output"][1] is not None


def test_a_root_gradient_a_pass_never_takes_does_not_reach_the_next_pass(tmp_path):
    """autograd.grad([y, z], [other.weight], [g, None]) gives the watched output y a root gradient of 100s, but
    needs only z's side: y's node never runs. The seed stayed in y's watch and was added to the next pass's
    gradient (349.87 where 3.46 is right)."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.uses, self.other = torch.nn.Linear(4, 4), _UsesItsOutput(), torch.nn.Linear(4, 1)

        def forward(self, x):
            y, s = self.uses(self.fc(x))
            return y, s, self.other(x).sum()

    model = Net()
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    y, s, z = model(torch.randn(3, 4))
    torch.autograd.grad([y, z], [model.other.weight], grad_outputs=[torch.full_like(y, 100.0), None],
                        retain_graph=True)
    (y.sum() + s).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    record = dump_of(tmp_path)["dump"]["data"]["Module.uses._UsesItsOutput.backward.0"]
    assert math.isclose(record["input"][0]["Norm"], torch.ones_like(y).norm().item(), rel_tol=1e-6)


def test_a_root_gradient_is_taken_in_the_roots_dtype(tmp_path):
    """y.backward(float32 ones) on a bfloat16 Identity output: the engine casts a root's gradient to the root's
    dtype; the watch kept it as given, and the record said float32."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Identity()).to(torch.bfloat16)
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    y = model(torch.randn(3, 4, dtype=torch.bfloat16))
    y.backward(torch.ones(3, 4, dtype=torch.float32))
    dbg.stop()
    dbg.step()
    dbg.close()
    record = dump_of(tmp_path)["dump"]["data"]["Module.1.Identity.backward.0"]
    assert record["input"][0]["dtype"] == "torch.bfloat16" and record["input"][0]["Norm"] == pytest.approx(12 ** 0.5)


class _KeepsAux(torch.nn.Module):
    """A module inside the recorded one that keeps a value in an attribute (a router's load-balancing loss)."""

    def __init__(self, every_call=True):
        super().__init__()
        self.every_call, self.fc, self.gate = every_call, torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, h):
        if self.every_call or not hasattr(self, "aux_loss"):
            self.aux_loss = self.gate(h).pow(2).mean()
        return self.fc(h)


class _Wraps(torch.nn.Module):
    def __init__(self, every_call=True):
        super().__init__()
        self.inner = _KeepsAux(every_call)

    def forward(self, h):
        return self.inner(h) * 2


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_value_a_module_inside_keeps_in_an_attribute_is_part_of_the_outer_share(tmp_path, level):
    """`self.inner.aux_loss`, added to the loss by the caller: the outer module's share of h's gradient was what
    its returned output sends back alone (the nodes that made the inner module's kept value were not walked; only
    the outer module's own attributes were), and its record came before the gate's. It is h's whole gradient now
    (the outer module is h's only consumer), after the gate's record, as msprobe records it."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.outer = torch.nn.Linear(8, 8), _Wraps()

        def forward(self, x):
            h = self.emb(x)
            h.retain_grad()
            self.h = h
            return self.outer(h).sum() + self.outer.inner.aux_loss

    model = Net()
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    model(torch.randn(4, 8)).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    record = data["Module.outer._Wraps.backward.0"]
    assert math.isclose(record["output"][0]["Norm"], model.h.grad.norm().item(), rel_tol=1e-6)
    names = list(data)
    assert (names.index("Module.outer.inner.gate.Linear.backward.0") < names.index("Module.outer._Wraps.backward.0")
            < names.index("Module.emb.Linear.backward.0")), names


def test_a_value_a_module_inside_kept_from_an_earlier_call_is_not_part_of_a_later_calls_share(tmp_path):
    """The outer module called twice, the inner one keeping its aux loss from the first call alone: the second
    call's share of its input's gradient is its own (no node of that call made the kept value), the first call's
    takes in the aux loss."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.outer = torch.nn.Linear(8, 8), _Wraps(every_call=False)

        def forward(self, x):
            h1, h2 = self.emb(x), self.emb(x * 2)
            for h in (h1, h2):
                h.retain_grad()
            self.hs = (h1, h2)
            return self.outer(h1).sum() + (self.outer(h2) * 3).sum() + self.outer.inner.aux_loss

    model = Net()
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    model(torch.randn(4, 8)).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    for k, h in enumerate(model.hs):
        share = data[f"Module.outer._Wraps.backward.{k}"]["output"][0]
        assert math.isclose(share["Norm"], h.grad.norm().item(), rel_tol=1e-6), k


def test_a_tensor_returned_at_two_positions_has_its_total_gradient_at_both(tmp_path):
    """`return y, y`: one tensor object at both positions, so every consumer after the call has the same edge to
    y's node and nothing tells which position it took y from. Both positions of the record hold y's total
    gradient (msprobe, whose identity Function makes a distinct view per position, has each position's: a
    documented difference, docs/compatibility.md); the training's gradients are untouched."""
    from module_backward_run import Net

    torch.manual_seed(0)
    model, x = Net("twice"), torch.randn(3, 4)
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    model(x).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    used = [p for p in model.parameters() if p.grad is not None]   # (the outer module is not called here)
    collected = [p.grad.clone() for p in used]
    record = dump_of(tmp_path)["dump"]["data"]["Module.twice.Twice.backward.0"]
    model.zero_grad()
    y = model.twice.fc(model.emb(x))
    y.retain_grad()
    ((y * 2).sum() + (y * 3).sum() + (y * y).sum()).backward()
    assert [i["Norm"] for i in record["input"]] == [pytest.approx(y.grad.norm().item(), rel=1e-6)] * 2
    model.zero_grad()
    model(x).backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(collected, used))


def _run_case(tmp_path, tool, case, plain=False):
    import json
    import os
    import subprocess
    import sys

    from conftest import PEER_PYTHON

    python = PEER_PYTHON if tool == "msprobe" else sys.executable
    out = tmp_path / f"{tool}_{case}"
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_backward_run.py")
    lines = subprocess.run([python, script, tool, case, str(out)] + (["none"] if plain else []),
                           capture_output=True, text=True, timeout=600, check=True).stdout.strip().splitlines()
    return json.loads(lines[-2]), json.loads(lines[-1])


def test_a_value_a_module_inside_keeps_is_recorded_as_msprobe_records_it(tmp_path):
    """The inner module's kept aux loss: every backward record, in msprobe's order, with msprobe's gradients; the
    training's numbers are those of a run without a collector, bit for bit."""
    from conftest import need_peers

    need_peers()
    ours, trained = _run_case(tmp_path, "tbprobe", "inner")
    theirs, _ = _run_case(tmp_path, "msprobe", "inner")
    assert [r[0] for r in ours] == [r[0] for r in theirs]
    for a, b in zip(ours, theirs):
        assert a[1:] == [[pytest.approx(v, rel=1e-6) for v in side] for side in b[1:]], a[0]
    assert trained == _run_case(tmp_path / "plain", "tbprobe", "inner", plain=True)[1]


def test_a_tensor_returned_at_two_positions_differs_from_msprobe_only_as_documented(tmp_path):
    """msprobe's record of `return y, y` has each position's own gradient (checked here against autograd's, through
    a view per position), tbprobe's the total at both; every other record is msprobe's."""
    from conftest import need_peers
    from module_backward_run import Net

    need_peers()
    ours, trained = _run_case(tmp_path, "tbprobe", "twice")
    theirs, _ = _run_case(tmp_path, "msprobe", "twice")
    assert [r[0] for r in ours] == [r[0] for r in theirs]
    name = "Module.twice.Twice.backward.0"
    for a, b in zip(ours, theirs):
        if a[0] != name:
            assert a[1:] == [[pytest.approx(v, rel=1e-6) for v in side] for side in b[1:]], a[0]
    torch.manual_seed(0)
    model, x = Net("twice"), torch.randn(3, 4)
    y = model.twice.fc(model.emb(x))
    y.retain_grad()
    a, b = y.view_as(y), y.view_as(y)
    for t in (a, b):
        t.retain_grad()
    ((a * 2).sum() + (b * 3).sum() + (a * b).sum()).backward()
    msprobe_inputs = dict((r[0], r[1]) for r in theirs)[name]
    assert msprobe_inputs == [pytest.approx(a.grad.norm().item(), rel=1e-6), pytest.approx(b.grad.norm().item(),
                                                                                          rel=1e-6)]
    assert dict((r[0], r[1]) for r in ours)[name] == [pytest.approx(y.grad.norm().item(), rel=1e-6)] * 2
    assert trained == _run_case(tmp_path / "plain", "tbprobe", "twice", plain=True)[1]
