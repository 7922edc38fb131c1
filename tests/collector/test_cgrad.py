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


@pytest.mark.parametrize("model, level", [("gpt", "L0"), ("conv", "L0"), ("gpt", "mix"), ("conv", "L1")])
def test_cpp_and_python_hooks_write_the_same_dumps(tmp_path, monkeypatch, model, level):
    runs = []
    for name, hooks in (("cpp", (session._hook_node, session._hook_nodes)), ("python", (None, None))):
        monkeypatch.setattr(session, "_hook_node", hooks[0])
        monkeypatch.setattr(session, "_hook_nodes", hooks[1])
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


def test_the_node_post_hook_gets_what_register_hook_gives():
    """_cgrad.hook_nodes (an operator's backward record at L1): each distinct node of the tensors once, and the
    same (grad_inputs, grad_outputs) as grad_fn.register_hook, None where a gradient is undefined."""
    def run(hook):
        x = torch.arange(6.0, requires_grad=True)
        w = torch.ones(2, requires_grad=True)
        a, b, c = x.split(2)                  # one node, three outputs; c gets no gradient
        y = a * w                             # a node of two inputs
        got = []
        n = hook([a, b, c, y, torch.ones(2, requires_grad=True)], lambda gi, go: got.append((gi, go)))
        ((y * 2).sum() + (b * 3).sum()).backward()
        return n, [tuple(tuple(None if g is None else g.tolist() for g in part) for part in call) for call in got]

    def python(tensors, fn):
        nodes = []
        for t in tensors:
            if t.grad_fn is not None and not any(t.grad_fn is g for g in nodes):
                nodes.append(t.grad_fn)
        for g in nodes:
            g.register_hook(fn)
        return len(nodes)

    n, calls = run(session._hook_nodes)
    assert n == 2 and (n, calls) == run(python)                       # the split's node and the product's
    assert calls[0] == (([2.0, 2.0], [0.0, 2.0]), ([2.0, 2.0],))      # the product: d/da, d/dw; from y*2
    assert calls[1][1] == ([2.0, 2.0], [3.0, 3.0], None)              # the split: c's gradient is undefined


def test_the_node_post_hook_refuses_bad_calls_and_never_reaches_the_backward(monkeypatch):
    with pytest.raises(TypeError):
        session._hook_nodes((torch.ones(1),), print)                   # a list, not a tuple
    with pytest.raises(TypeError):
        session._hook_nodes([], "not callable")
    assert session._hook_nodes([torch.ones(2, requires_grad=True), "x"], print) == 0   # a leaf, not a tensor
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))

    class Broken:
        def __call__(self, gi, go):
            raise ValueError("forced")

    cb = Broken()
    ref = weakref.ref(cb)
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    assert session._hook_nodes([y], cb) == 1
    (y * 4).sum().backward()                                          # goes through
    assert torch.equal(x.grad, torch.full((3,), 8.0)) and seen == [ValueError]
    del cb, y
    gc.collect()
    assert ref() is None                                              # freed with the graph


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


def _shares(x_of, module_fn, others):
    """Each input's share of its gradient through _cgrad.call_start / hook_consumers around `module_fn`, and the
    leaf's gradient, for inputs made by `x_of(leaf)` that `others` also consume outside the "module"."""
    from tbprobe.collector._cgrad import call_start, hook_consumers

    leaf = torch.randn(4, 3, requires_grad=True)
    ins = x_of(leaf)
    start = call_start(ins)
    out = module_fn(*ins)
    got = {}
    counts, used = hook_consumers(start, [out], lambda i, g: got.setdefault(i, g.clone()))
    assert used == ()
    (out.sum() * 2 + others(*ins)).backward()
    return got, counts, leaf.grad


def test_hook_consumers_gives_the_modules_share_and_leaves_the_gradients_alone():
    """The share of an input the module uses three times (through in-place work, too) is the sum of what its own
    nodes send it, not the total over the consumers outside; and the leaf's gradient is bit for bit the one of the
    same computation with no hook at all (a view or hook Function between x and the module would sum the module's
    contributions first, in another order)."""
    torch.manual_seed(0)

    def module(x, w):
        y = x * w
        z = (x.pow(2) + y).relu_()      # in-place inside the module
        return z * x

    def x_of(leaf):
        return [leaf * 1.5, (leaf.detach() + 1).requires_grad_()]

    got, counts, grad = _shares(x_of, module, lambda x, w: (x.exp() * 3).sum())
    assert counts == (3, 1)             # x: x * w, x.pow(2) and z * x; w: x * w
    torch.manual_seed(0)
    leaf = torch.randn(4, 3, requires_grad=True)
    x, w = x_of(leaf)
    x_ = x.detach().requires_grad_()
    (module(x_, w).sum() * 2).backward()
    assert torch.equal(got[0], x_.grad)       # the module's share alone
    plain = torch.randn(4, 3).copy_(leaf.detach()).requires_grad_()
    x, w = x_of(plain)
    (module(x, w).sum() * 2 + (x.exp() * 3).sum()).backward()
    assert torch.equal(grad, plain.grad)      # the training's own gradient, unchanged


def test_hook_consumers_counts_nothing_for_an_unused_or_returned_input():
    from tbprobe.collector._cgrad import call_start, hook_consumers

    x = torch.randn(3, requires_grad=True) * 1
    unused = torch.randn(3, requires_grad=True) * 1
    start = call_start([x, unused])
    # an identity module: x returned as it is, no node of the call's sends it anything, and it is an output whose
    # gradient is what comes after the call (listed in `used`)
    assert hook_consumers(start, [x], lambda i, g: None) == ((0, 0), (0,))
    with pytest.raises(TypeError):
        call_start(["not a tensor"])
    with pytest.raises(TypeError):
        hook_consumers("not a start", [x], print)


def test_hook_consumers_keeps_to_the_calls_thread():
    """Autograd numbers its nodes per thread: a call on a fresh thread (a DataParallel replica, a pipeline stage's
    worker) starts at a low number, and its input's history, made on the main thread, has higher ones. That history
    is not the call's: the share of `w` is what the call's own `x + w` sends it, not also what `x = w * 3`, made
    before the call, sends."""
    import threading

    from tbprobe.collector._cgrad import call_start, hook_consumers

    for _ in range(200):                   # the main thread's node numbers run ahead of a new thread's
        (torch.ones(1, requires_grad=True) * 2).sum()
    w = torch.randn(3, requires_grad=True) * 1
    x = w * 3
    got, counts = {}, []

    def call():
        start = call_start([x, w])
        out = x + w
        counts.append(hook_consumers(start, [out], lambda i, g: got.setdefault(i, g.clone()))[0])
        out.sum().backward()

    worker = threading.Thread(target=call)
    worker.start()
    worker.join()
    assert counts == [(1, 1)]
    assert torch.equal(got[1], torch.ones(3)) and torch.equal(got[0], torch.ones(3))


def test_hook_consumers_marks_a_view_changed_in_place():
    """A view input changed in place (ReLU(inplace=True) on a slice) sends its gradient to its base through a
    CopySlices node, past the view's own: -1, the share unknown (the collector writes null, not the gradient of the
    changed value). The same slice changed out of place is found as usual."""
    from tbprobe.collector._cgrad import call_start, hook_consumers

    h = torch.randn(3, 8, requires_grad=True) * 1
    x = h[:, :4]
    start = call_start([x])
    out = torch.relu_(x)
    assert hook_consumers(start, [out], lambda i, g: None) == ((-1,), ())
    y = (torch.randn(3, 8, requires_grad=True) * 1)[:, :4]
    start = call_start([y])
    assert hook_consumers(start, [torch.relu(y)], lambda i, g: None) == ((1,), ())


def test_a_watched_output_reports_what_comes_after_the_call_once_a_pass_looked():
    """_cgrad.hook_watched: the output's node reports the sum of the consumers after `end` (the call's end) once
    discover() has hooked them from the pass's roots; without discover, the total, as hook_node reports it; a
    consumer with two edges to the output counts both; torch.autograd.grad starts discover through
    later_consumers' wrapper, which uninstall takes away."""
    from tbprobe.collector._cgrad import clear_watches, discover, hook_watched, watching
    from tbprobe.collector.pytorch import later_consumers

    grad = torch.autograd.grad

    def run(find):
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        o = w * 2                     # the "call" makes o ...
        inside = o.sin()              # ... and uses it itself
        got = {}
        assert hook_watched(o, lambda i, g: got.setdefault(i, g), 0) and watching()
        loss = inside.sum() + (o * o).sum() + o.exp().sum()    # after the call: o * o (two edges) and exp
        if find == "discover":
            assert discover([loss]) == 3
            loss.backward()
        elif find == "grad":
            later_consumers.install(lambda what, exc: None)
            try:
                torch.autograd.grad(loss, [w])
            finally:
                later_consumers.uninstall()
        else:
            loss.backward()
        clear_watches()
        return got[0], o.detach()

    after, o = run("discover")
    assert torch.allclose(after, 2 * o + o.exp())       # no o.cos(): the call's own use is left out
    assert torch.allclose(run("grad")[0], after)
    total, o = run("none")
    assert torch.allclose(total, o.cos() + 2 * o + o.exp())
    assert not watching() and torch.autograd.grad is grad
