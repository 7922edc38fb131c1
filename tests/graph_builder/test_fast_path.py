"""The fast path (fast_path.py) must give byte for byte what the general path gives: every entry pair below is
rendered both ways, on plain entries (which the fast path takes) and on hostile ones (NaN/Inf, ints and bools
in statistics, missing bench items, dtype/shape/grad differences, exempt and placeholder APIs, nested
arguments, non-ASCII names) which it must either render identically or hand back."""
import math
import random

import pytest

from tbprobe.graph_builder import compare as compare_mod
from tbprobe.graph_builder import fast_path
from tbprobe.graph_builder import rows as rows_mod
from tbprobe.graph_builder.compare import compare_entries
from tbprobe.graph_builder.model import Node

_FLOATS = [0.0, -0.0, 1.0, -1.5, 3.0, 0.1, 1e-05, 123456789.123, 1e20, -2.5e-08, math.inf, -math.inf, math.nan,
           0.30000000000000004, 7, 0, -3, None, True]
_NAMES = ["Torch.matmul.0.forward", "Functional.linear.3.backward", "Torch.empty.0.forward",
          "Distributed._all_gather_base.1.forward", "Module.layer.Linear.forward.0", "Tensor.__add__.7.forward",
          "Module.blocks.0.attn.Attention.backward.2", "Torch.caf\u00e9.0.forward",
          "Module.m.parameters_grad", "Tensor.to.2.forward"]


def _tensor(rng: random.Random, plain: bool) -> dict:
    item = {"type": "torch.Tensor", "dtype": rng.choice(["torch.float32", "torch.bfloat16"]),
            "shape": rng.choice([[4, 3], [2], [], [4, 3, 1]]),
            "Max": rng.uniform(-5, 5), "Min": rng.uniform(-5, 5), "Mean": rng.uniform(-1, 1),
            "Norm": rng.uniform(0, 50), "requires_grad": rng.choice([True, False])}
    if not plain:
        for key in ("Max", "Min", "Mean", "Norm"):
            if rng.random() < 0.3:
                item[key] = rng.choice(_FLOATS)
        if rng.random() < 0.1:
            item["requires_grad"] = None
        if rng.random() < 0.1:
            item["data_name"] = "x.pt"
        if rng.random() < 0.05:
            item = dict(reversed(list(item.items())))
    return item


def _scalar(rng: random.Random, plain: bool) -> dict:
    value = rng.choice([1, -1, 0, 2.5, 1.0, True, False] + ([math.nan, math.inf, 3, 0.0] if not plain else []))
    item = {"type": type(value).__name__, "value": value}
    if not plain and rng.random() < 0.1:
        item["extra"] = "x"
    return item


def _item(rng: random.Random, plain: bool):
    r = rng.random()
    if not plain and r < 0.08:
        return None
    if not plain and r < 0.12:
        return [_tensor(rng, plain), None]  # nested: the general path only
    return _tensor(rng, plain) if r < 0.7 else _scalar(rng, plain)


def _entry(rng: random.Random, plain: bool) -> dict:
    entry: dict = {}
    keys = ["input_args", "input_kwargs", "output"] if plain or rng.random() < 0.7 else \
        rng.sample(["input_args", "input", "input_kwargs", "parameters", "output"], 3)
    for key in keys:
        if key in ("input_kwargs", "parameters"):
            entry[key] = {rng.choice(["alpha", "dim", "w\u00e9ight", "bias"]) + str(i): _item(rng, plain)
                          for i in range(rng.randint(0, 2))}
        else:
            entry[key] = [_item(rng, plain) for _ in range(rng.randint(0, 3))]
    return entry


def _perturb(rng: random.Random, entry: dict, plain: bool) -> dict:
    """The bench twin: the same layout with other numbers, sometimes other dtypes, shapes or values."""
    def item(x):
        if isinstance(x, list):
            return [item(v) for v in x]
        if not isinstance(x, dict):
            return x
        y = dict(x)
        for key in ("Max", "Min", "Mean", "Norm"):
            if key in y and isinstance(y[key], float) and math.isfinite(y[key]) and rng.random() < 0.8:
                y[key] = y[key] * rng.choice([1.0, 1.001, 1.5, 20.0, 0.0]) + rng.choice([0.0, 0.01])
        if "value" in y and rng.random() < 0.3:
            y["value"] = _scalar(rng, plain)["value"]
        if not plain and rng.random() < 0.1 and "dtype" in y:
            y["dtype"] = "torch.float16"
        if not plain and rng.random() < 0.1 and "shape" in y:
            y["shape"] = [9]
        if not plain and rng.random() < 0.1 and "requires_grad" in y:
            y["requires_grad"] = not y["requires_grad"]
        return y

    out = {}
    for key, value in entry.items():
        if isinstance(value, list):
            out[key] = [item(v) for v in value]
            if not plain and rng.random() < 0.1 and out[key]:
                out[key].pop()
        elif isinstance(value, dict):
            out[key] = {k: item(v) for k, v in value.items()}
        else:
            out[key] = value
    if not plain and rng.random() < 0.1:
        out["output"] = [_tensor(rng, plain)]
    return out


def _general(monkeypatch, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(compare_mod, "compare_stats", lambda *a, **k: None)
        return compare_entries(*args, **kw)


def _fields(res):
    return (res.precision, res.input_text, res.output_text, res.metric, res.inputs_ok, res.bench_texts)


@pytest.mark.parametrize("plain", [True, False])
def test_compare_fast_path_matches_general_path(monkeypatch, plain):
    rng = random.Random(7 if plain else 11)
    taken = 0
    float_slots = []  # the all-float statistics pairs, formatted without metrics._stat: must be taken too
    real_float_slot = fast_path._float_slot
    monkeypatch.setattr(fast_path, "_float_slot", lambda *a: float_slots.append(real_float_slot(*a)) or
                        float_slots[-1])
    for _ in range(3000):
        name = rng.choice(_NAMES)
        de = _entry(rng, plain)
        be = _perturb(rng, de, plain)
        fast = compare_entries(name, de, name, be, "statistics", bench_texts=True)
        general = _general(monkeypatch, name, de, name, be, "statistics", bench_texts=True)
        f, g = _fields(fast), _fields(general)
        # NaN metrics compare unequal to themselves: compare them as text
        assert repr(f) == repr(g), (name, de, be)
        if fast_path.compare_stats(name, de, name, be, False, False, compare_mod._FAST_MSGS, True) is not None:
            taken += 1
    # the fast path must actually run on plain entries (and on a good share of the hostile ones)
    assert taken > (2500 if plain else 300)
    made = [s for s in float_slots if s is not None]
    assert len(made) > (3000 if plain else 300)
    if not plain:  # non-finite Max/Min reach the inf/nan check, and non-float statistics are handed back
        assert any(s[8] for s in made) and None in float_slots


@pytest.mark.parametrize("plain", [True, False])
def test_node_texts_fast_path_matches_general_path(monkeypatch, plain):
    rng = random.Random(3 if plain else 5)
    taken = 0
    for _ in range(2000):
        name = rng.choice(_NAMES)
        entry = _entry(rng, plain)
        node = Node(name, "1")
        with_md5 = rng.random() < 0.3
        fast = rows_mod.node_texts(node, entry, with_md5)
        with monkeypatch.context() as m:
            m.setattr(rows_mod, "entry_texts", lambda *a: None)
            general = rows_mod.node_texts(node, entry, with_md5)
        assert fast == general, (name, entry)
        if fast_path.entry_texts(name, entry, with_md5) is not None:
            taken += 1
    assert taken > (1500 if plain else 300)
