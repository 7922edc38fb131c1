"""How a call was written (tbprobe/collector/pytorch/call_site.py), and the operator records it gives their layout."""
import functools

import torch
import torch.nn.functional as F
from conftest import load_rank, make_debugger, rank_dirs

from tbprobe.collector.pytorch.call_site import written_call


def _callee(a, b=1, *, c=2):
    return written_call(_callee.__code__)


def test_written_call_reads_positions_and_keyword_names_off_the_callers_instruction():
    assert _callee(1) == (1, ())
    assert _callee(1, 2) == (2, ())
    assert _callee(1, c=3) == (1, ("c",))
    assert _callee(a=1, b=2, c=3) == (0, ("a", "b", "c"))
    # a call through *args/**kwargs says nothing exact
    assert _callee(*(1, 2)) is None and _callee(1, **{"c": 3}) is None
    # a frame that is not running: None
    assert written_call((lambda: None).__code__) is None


def _records(tmp_path, fn):
    dbg = make_debugger(tmp_path, level="L1", steps=1)
    with dbg.collect():
        fn()
    dbg.close()
    assert dbg.hook_errors == 0
    return load_rank(rank_dirs(str(tmp_path / "dump"))[0])["dump"]["data"]


def _layout(entry):
    return ([a["type"] if isinstance(a, dict) else a for a in entry["input_args"]],
            {k: v["value"] for k, v in entry["input_kwargs"].items()})


def test_functional_calls_are_recorded_as_written(tmp_path):
    """msprobe wraps torch.nn.functional's functions and records each call as written; tbprobe's operator mode gets
    every parameter as a keyword and rebuilds the call from the call site."""
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    emb = torch.nn.Embedding(10, 3)
    pool = torch.nn.MaxPool2d(2)

    def calls():
        F.softmax(x, dim=1, dtype=torch.float32)
        F.softmax(x, 1)
        emb(torch.tensor([1, 2]))           # nn.Embedding passes its seven arguments by position
        pool(x)                             # a boolean-dispatched function: five by position, two by keyword
        functools.partial(F.softmax, dim=2)(x)

    data = _records(tmp_path, calls)
    assert _layout(data["Functional.softmax.0.forward"]) == (["torch.Tensor"], {"dim": 1, "dtype": "torch.float32"})
    assert _layout(data["Functional.softmax.1.forward"]) == (["torch.Tensor", "int"], {})
    args, kwargs = _layout(data["Functional.embedding.0.forward"])
    assert len(args) == 7 and kwargs == {}
    args, kwargs = _layout(data["Functional.max_pool2d.0.forward"])
    assert len(args) == 5 and sorted(kwargs) == ["ceil_mode", "return_indices"]
    # through a partial the call site is not the call's (dim=2 is nowhere in it): the rebuilt call, dim kept
    args, kwargs = _layout(data["Functional.softmax.2.forward"])
    assert args == ["torch.Tensor", "int"] and kwargs == {}
    assert data["Functional.softmax.2.forward"]["input_args"][1]["value"] == 2
