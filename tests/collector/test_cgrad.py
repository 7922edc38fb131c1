"""The C++ gradient hooks (tbprobe/collector/_cgrad.cpp) against Python's, and on their own."""
import gc
import glob
import os
import sys
import weakref

import pytest
import torch
from conftest import make_debugger
from run_model import train

from tbprobe.collector.pytorch import session


def test_the_cpp_hooks_are_built():
    # `make python` builds them (setup.py, with torch importable: pip install --no-build-isolation); without them
    # every other test here would pass on Python's hooks alone
    assert session._hook_node is not None, "tbprobe.collector._cgrad is not built"


def _dump_files(dump_path: str) -> dict:
    out = {}
    for path in sorted(glob.glob(os.path.join(dump_path, "**", "*.json"), recursive=True)):
        with open(path, "rb") as f:
            out[os.path.relpath(path, dump_path)] = f.read()
    return out


@pytest.mark.parametrize("model, level", [("gpt", "L0"), ("conv", "L0"), ("gpt", "mix")])
def test_cpp_and_python_hooks_write_the_same_dumps(tmp_path, monkeypatch, model, level):
    runs = []
    for name, hook in (("cpp", session._hook_node), ("python", None)):
        monkeypatch.setattr(session, "_hook_node", hook)
        (tmp_path / name).mkdir()
        dbg = make_debugger(tmp_path / name, level=level, steps=2)
        torch.manual_seed(3)
        train(dbg, model, steps=2)
        dbg.close()
        runs.append(_dump_files(str(tmp_path / name / "dump")))
    cpp, python = runs
    assert sorted(cpp) == sorted(python) and len(cpp) >= 8        # step0 and step1, four files each
    assert any(b"backward" in data for data in cpp.values())
    for path in cpp:
        assert cpp[path] == python[path], path


def test_the_hook_gets_its_own_gradient_among_the_nodes():
    x = torch.arange(6.0, requires_grad=True)
    a, b, c = x.split(2)                  # one node, three outputs: b is output 1
    got = []
    assert session._hook_node(b, lambda i, g: got.append((i, g.clone())), 7) is True
    ((a * 1).sum() + (b * 3).sum() + (c * 5).sum()).backward()
    assert len(got) == 1 and got[0][0] == 7
    assert torch.equal(got[0][1], torch.full((2,), 3.0))
    assert torch.equal(x.grad, torch.tensor([1.0, 1, 3, 3, 5, 5]))


def test_a_leaf_or_a_bad_call_is_refused():
    leaf = torch.ones(2, requires_grad=True)
    assert session._hook_node(leaf, print, 0) is False          # no node: the caller uses a tensor hook
    with pytest.raises(TypeError):
        session._hook_node("not a tensor", print, 0)
    with pytest.raises(TypeError):
        session._hook_node(leaf * 2, "not callable", 0)


def test_a_failing_hook_never_reaches_the_backward(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))

    def broken(i, g):
        raise ValueError("forced")

    x = torch.ones(3, requires_grad=True)
    y = x * 2
    session._hook_node(y, broken, 0)
    (y * 4).sum().backward()              # goes through
    assert torch.equal(x.grad, torch.full((3,), 8.0))
    assert seen == [ValueError]


def test_the_hook_lets_its_callable_go_with_the_graph():
    class Callback:
        def __call__(self, i, g):
            pass

    cb = Callback()
    ref = weakref.ref(cb)
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    session._hook_node(y, cb, 0)
    del cb
    gc.collect()
    assert ref() is not None              # the node holds it ...
    del y
    gc.collect()
    assert ref() is None                  # ... and frees it with itself


class _Marked(torch.Tensor):
    pass


def test_a_modules_input_is_an_alias_from_cpp_and_a_subclass_keeps_view_as():
    from tbprobe.collector.pytorch import module_hooks
    assert module_hooks._c_alias is not None, "tbprobe.collector._cgrad is not built"
    x = torch.randn(3, 4, requires_grad=True)
    h = x * 1.5
    (a,), _ = module_hooks._alias_inputs((h,), {})
    assert type(a.grad_fn).__name__ == "AliasBackward0" and a._base is h and torch.equal(a, h)
    # the gradient passes through the alias as it is: the same bits as with no alias at all
    (a * a).sum().backward()
    with_alias = x.grad.clone()
    x.grad = None
    h = x * 1.5
    (h * h).sum().backward()
    assert torch.equal(with_alias, x.grad)
    # a subclass gets view_as (its __torch_function__ sees it, and it stays its type); so does everything under
    # torch.compile (module_hooks._fast_view says why)
    m = (torch.randn(2, requires_grad=True) * 1).as_subclass(_Marked)
    (mv,), kw = module_hooks._alias_inputs((m,), {"k": x * 1})
    assert type(mv) is _Marked and type(kw["k"].grad_fn).__name__ == "AliasBackward0"
    with pytest.raises(TypeError):
        module_hooks._c_alias("not a tensor")
