"""dump.json holding NaN or Infinity: written as the reference writes them (NaN, Infinity, -Infinity, the json
module's extensions), by orjson through _cjson's swap, with the tree left exactly as it was; and by the json
module wherever that swap cannot vouch for the tree."""
import json
import math

import numpy as np
import pytest
import torch
from conftest import dump_of

from tbprobe import PrecisionDebugger
from tbprobe.collector import writer
from tbprobe.collector._cjson import dumps_nonfinite

orjson = pytest.importorskip("orjson")
FRAGS = (orjson.Fragment(b"NaN"), orjson.Fragment(b"Infinity"), orjson.Fragment(b"-Infinity"))
NAN, INF = float("nan"), float("inf")


def _same(a, b) -> bool:
    """Equal trees, NaN equal to NaN, types kept (a tuple stays a tuple)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _tree():
    return {"Module.a.forward.0": {"input_args": [{"type": "torch.Tensor", "Max": 0.0, "Min": -INF, "Mean": -INF,
                                                   "Norm": INF, "nan_count": 0, "inf_count": 12}],
                                   "output": [{"Max": NAN, "Min": NAN, "shape": [2, 3]}, None, "text", True]},
            "list": [INF, [-INF, [NAN]]], "tuple": (1.5, "x"), "big": 2 ** 40}


def test_nonfinite_floats_written_as_the_json_module_writes_them_and_put_back():
    tree = _tree()
    floats = [tree["Module.a.forward.0"]["input_args"][0]["Min"], tree["list"][0]]
    text = writer.json_bytes(tree, indent=None, finite=False)
    assert b" " not in text   # orjson's compact text, not the json module's ", " / ": "
    assert _same(json.loads(text), json.loads(json.dumps(tree, allow_nan=True)))
    assert b"-Infinity" in text and b"NaN" in text and b"null" in text   # the real None stays null
    # the tree is the same objects as before: the very float objects back in place, the tuple untouched
    assert _same(tree, _tree())
    assert tree["Module.a.forward.0"]["input_args"][0]["Min"] is floats[0] and tree["list"][0] is floats[1]


@pytest.mark.parametrize("tree", [
    pytest.param({"t": (NAN, 1)}, id="nonfinite-in-a-tuple"),
    pytest.param({"np": np.float64("inf")}, id="float-subclass"),
    pytest.param({"sub": type("D", (dict,), {})(x=INF)}, id="dict-subclass"),
])
def test_trees_the_swap_cannot_vouch_for_are_refused_unchanged(tree):
    before = repr(tree)
    assert dumps_nonfinite(tree, orjson.dumps, *FRAGS) is None
    assert repr(tree) == before
    # and json_bytes writes them with the json module, NaN/Infinity and all
    text = writer.json_bytes(tree, indent=None)
    assert b"NaN" in text or b"Infinity" in text


def test_too_deep_refused_and_errors_of_dumps_restore_the_tree():
    deep = cur = {}
    for _ in range(100):
        cur["n"] = {}
        cur = cur["n"]
    cur["v"] = INF
    assert dumps_nonfinite(deep, orjson.dumps, *FRAGS) is None and cur["v"] == INF
    bad = {"x": -INF, "huge": 2 ** 70}   # orjson refuses integers past 64 bits
    with pytest.raises(TypeError):
        dumps_nonfinite(bad, orjson.dumps, *FRAGS)
    assert type(bad["x"]) is float and bad["x"] == -INF
    assert json.loads(writer.json_bytes(bad, indent=None)) == {"x": -INF, "huge": 2 ** 70}


def test_a_step_with_an_attention_mask_of_minus_infinity_is_written_compact(tmp_path):
    """A causal mask of -inf (nn.Transformer's) is an input of every attention call: the step's dump.json took
    the json module, about 15x slower than orjson over a step. Written now by orjson, with the reference's
    -Infinity."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    dbg.start(model=layer)
    layer(torch.randn(2, 5, 8), src_mask=mask).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    text = next((tmp_path / "dump").rglob("dump.json")).read_bytes()
    assert b": " not in text and b"-Infinity" in text
    data = dump_of(tmp_path)["dump"]["data"]
    attn = data["Module.self_attn.MultiheadAttention.forward.0"]
    mins = [v["Min"] for v in attn["input_kwargs"].values() if isinstance(v, dict) and "Min" in v]
    assert -INF in mins
