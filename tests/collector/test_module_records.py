"""A module's own records at L0 and mix, whatever the user's forward hooks do to its output (a hook returning
another output, or changing it in place, leaves the module's forward and backward records its own), and a
module's namedtuple and dataclass outputs written by field, as the reference writes them."""
from typing import Optional

import pytest
import torch
from conftest import dump_of, make_debugger


class _Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        import collections

        y = self.fc(x)
        return collections.namedtuple("Pair", "a b")(y, y * 2)


def test_a_module_output_is_recorded_before_the_users_forward_hooks_change_it(tmp_path):
    """tbprobe's forward hook ran after the user's hooks registered before start(): it recorded their output,
    not the module's (msprobe records the module's either way). A namedtuple output is a dict of its fields, as
    in the reference (it was a list)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _Pair())
    model[0].register_forward_hook(lambda m, a, o: o * 100)
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=model)
    x = torch.randn(2, 4)
    raw = torch.nn.functional.linear(x, model[0].weight, model[0].bias)
    out = model(x)
    (out.a.sum() + out.b.sum()).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    assert data["Module.0.Linear.forward.0"]["output"][0]["Max"] == pytest.approx(raw.max().item())
    assert data["Module.1._Pair.forward.0"]["input_args"][0]["Max"] == pytest.approx(100 * raw.max().item())
    pair = data["Module.1._Pair.forward.0"]["output"]
    assert sorted(pair) == ["a", "b"] and pair["b"]["Max"] == pytest.approx(2 * pair["a"]["Max"])


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("how", ["replace", "in place"])
def test_a_users_forward_hook_changing_the_output_leaves_the_modules_record_whole(tmp_path, level, how):
    """A forward hook registered before start() that returns another output (`o * 2`) left the forward record
    on the module's own output but its backward on the gradient of the hook's (half the module's); one that
    changes the output in place (`o.mul_(2)`) was seen in the forward record too. Both records are the module's
    own now, as the reference's, and at mix the hook's operators hang beside the module, not inside it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    seen = {}

    def hook(mod, args, out):
        seen["out"] = out.detach().clone()
        out.register_hook(lambda g: seen.__setitem__("grad", g.clone()))
        return out.mul_(2) if how == "in place" else out * 2

    model[0].register_forward_hook(hook)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    with dbg.collect(model):
        model(torch.randn(3, 4)).pow(2).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 0
    dump = dump_of(tmp_path)
    data, construct = dump["dump"]["data"], dump["construct"]
    out = data["Module.0.Linear.forward.0"]["output"][0]
    assert out["Max"] == pytest.approx(seen["out"].max().item()) and out["Norm"] == pytest.approx(
        seen["out"].norm().item())
    assert sorted(data["Module.0.Linear.forward.0"]["parameters"]) == ["bias", "weight"]
    grad = data["Module.0.Linear.backward.0"]["input"][0]
    assert grad["Norm"] == pytest.approx(seen["grad"].norm().item())
    if level == "mix":
        mul = "Tensor.mul_.0" if how == "in place" else "Tensor.__mul__.0"
        assert construct[f"{mul}.forward"] is None and construct["Functional.linear.0.forward"] == (
            "Module.0.Linear.forward.0")
        names = list(data)
        assert names.index("Module.0.Linear.forward.0") < names.index(f"{mul}.forward")


def test_a_modules_namedtuple_and_dataclass_outputs_by_field(tmp_path):
    """A namedtuple output is a dict of its fields, and a dataclass one (transformers' ModelOutput, an OrderedDict of
    its fields that are not None) a dict of every field, None ones included, as the reference writes them; their
    tensors' gradients are still recorded."""
    import collections
    import dataclasses

    Pair = collections.namedtuple("Pair", ["a", "b"])

    @dataclasses.dataclass
    class Out(collections.OrderedDict):
        loss: Optional[torch.Tensor] = None
        logits: Optional[torch.Tensor] = None

        def __post_init__(self):     # (as ModelOutput: only the fields that are set are keys)
            for f in dataclasses.fields(self):
                if getattr(self, f.name) is not None:
                    self[f.name] = getattr(self, f.name)

    @dataclasses.dataclass
    class Plain:
        hidden: torch.Tensor
        note: Optional[str] = None

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            h = self.lin(x)
            return Pair(h, 2), Out(logits=h * 3), Plain(h * 4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            pair, out, plain = self.inner(x)
            return pair.a.sum() + out["logits"].sum() + plain.hidden.sum()

    torch.manual_seed(0)
    net = Net()
    dbg = make_debugger(tmp_path, level="L0", summary_mode="statistics")
    with dbg.collect(net):
        net(torch.randn(2, 3)).backward()
    dbg.close()
    assert dbg.hook_errors == 0
    data = dump_of(tmp_path)["dump"]["data"]
    pair, out, plain = data["Module.inner.Inner.forward.0"]["output"]
    assert list(pair) == ["a", "b"] and pair["a"]["shape"] == [2, 3] and pair["b"] == {"type": "int", "value": 2}
    assert list(out) == ["loss", "logits"] and out["loss"] is None and out["logits"]["shape"] == [2, 3]
    assert list(plain) == ["hidden", "note"] and plain["note"] is None
    # the gradients of every tensor in them, a plain dataclass's too
    assert [i["shape"] for i in data["Module.inner.Inner.backward.0"]["input"]] == [[2, 3], [2, 3], [2, 3]]
