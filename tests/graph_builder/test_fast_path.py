"""The fast path (fast_path.py) must give byte for byte what the general path gives: every entry pair below is
rendered both ways, on plain entries (which the fast path takes) and on hostile ones (NaN/Inf, ints and bools
in statistics, missing bench items, dtype/shape/grad differences, exempt and placeholder APIs, nested
arguments, non-ASCII names) which it must either render identically or hand back."""
import json
import math
import random
import struct

import pytest

from tbprobe.graph_builder import _rowtext, fast_path
from tbprobe.graph_builder import compare as compare_mod
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


# bench dtypes against the debug side's float32 / bfloat16: floats (mixed precision, graded by the numbers with a
# note) and other kinds (an error); the C test (float_dtype) must read each as dtypes.float_dtype does
_OTHER_DTYPES = ("torch.float16", "torch.float32", "torch.bfloat16", "torch.float64", "torch.float8_e4m3fn", "Float16",
                 "float64", "torch.half", "torch.double", "torch.int64", "torch.bool", "torch.complex64",
                 "torch.cfloat", "torch.qint8", "torch.floaty", "torch.flo", "torch.halfx", "DOUBLE", "torch.fl\u00f6at")


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
        elif rng.random() < 0.15 and "dtype" in y:   # mixed precision (a note) and other kinds of value (an error)
            y["dtype"] = rng.choice(_OTHER_DTYPES)
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


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("plain", [True, False])
def test_compare_fast_path_matches_general_path(monkeypatch, plain, strict):
    rng = random.Random(7 if plain else 11)
    taken = 0
    in_c = []         # what the C compare (compare_plain) took or handed back
    float_slots = []  # the all-float statistics pairs of what it handed back, formatted by the C float_slot
    real_plain, real_float_slot = fast_path._compare_plain, fast_path._float_slot
    monkeypatch.setattr(fast_path, "_compare_plain", lambda *a: in_c.append(real_plain(*a)) or in_c[-1])
    monkeypatch.setattr(fast_path, "_float_slot", lambda *a: float_slots.append(real_float_slot(*a)) or
                        float_slots[-1])
    notes = 0
    for _ in range(3000):
        name = rng.choice(_NAMES)
        de = _entry(rng, plain)
        be = _perturb(rng, de, plain)
        fast = compare_entries(name, de, name, be, "statistics", bench_texts=True, strict_dtype=strict)
        general = _general(monkeypatch, name, de, name, be, "statistics", bench_texts=True, strict_dtype=strict)
        notes += "mixed precision" in fast.input_text + fast.output_text
        f, g = _fields(fast), _fields(general)
        # NaN metrics compare unequal to themselves: compare them as text
        assert repr(f) == repr(g), (name, de, be)
        msgs = compare_mod._FAST_MSGS_STRICT if strict else compare_mod._FAST_MSGS
        if fast_path.compare_stats(name, de, name, be, False, False, msgs, True) is not None:
            taken += 1
    # the fast path must actually run on plain entries (and on a good share of the hostile ones), nearly all of
    # the plain ones in C
    assert taken > (2500 if plain else 300)
    # floating-point dtypes that differ are a note, by default only (and the C compare wrote some of them)
    noted_in_c = sum(r is not None and "mixed precision" in r[1] + r[2] for r in in_c)
    assert (notes == 0 and noted_in_c == 0) if strict else (notes > 30 and noted_in_c > 0)
    took = sum(r is not None for r in in_c)
    assert took > (4500 if plain else 300)
    if not plain:  # the Python part takes what C hands back: ints and bools in statistics, NaN/inf and more
        made = [s for s in float_slots if s is not None]
        assert made and any(s[8] for s in made) and None in float_slots
        assert any(r is None for r in in_c)


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


# ------------------------------------------------------------------------------------ the C row text (_rowtext)
_HOSTILE_FLOATS = [0.0, -0.0, 1e-05, 9.999999999999999e-05, 0.0001, 1e16, 9999999999999998.0, 2.0 ** 53,
                   2.0 ** 53 - 1, 1e300, -1e-300, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                   math.inf, -math.inf, math.nan, 0.1, 0.30000000000000004, 123456789.123, 2.5, 0.125]
_HOSTILE_NAMES = ['Torch.q"uote.0.forward', "Torch.back\\slash.0.forward", "Torch.nl\n\t\x01.0.forward",
                  "Torch.caf\u00e9.0.forward", "Torch.emoji\U0001f600.0.forward", "Torch.lone\ud800.0.forward",
                  "Torch.del\x7f.0.forward"]


def _general_texts(monkeypatch, name, entry, with_md5):
    with monkeypatch.context() as m:
        m.setattr(rows_mod, "entry_texts", lambda *a: None)
        return rows_mod.node_texts(Node(name, "1"), entry, with_md5)


def test_float_text_is_float_repr():
    rng = random.Random(13)
    values = list(_HOSTILE_FLOATS)
    for _ in range(30000):
        # random bit patterns around the magnitudes the C code formats itself (2^-14 .. 2^53), and beyond
        bits = (rng.getrandbits(1) << 63) | (rng.randint(1023 - 30, 1023 + 60) << 52) | rng.getrandbits(52)
        values.append(struct.unpack("<d", struct.pack("<Q", bits))[0])
        values.append(rng.uniform(-8, 8))
        values.append(round(rng.uniform(-1000, 1000), rng.randint(0, 8)))
        values.append(rng.randint(1, 10 ** 6) / 10 ** rng.randint(0, 10))
    for e in range(-16, 56):  # powers of two (the uneven rounding interval) and their neighbours
        for x in (2.0 ** e, -(2.0 ** e)):
            values += [x, math.nextafter(x, 0), math.nextafter(x, math.inf)]
    for k in range(-6, 18):
        for x in (10.0 ** k, 5 * 10.0 ** k, 2.5 * 10.0 ** k):
            values += [x, math.nextafter(x, 0), math.nextafter(x, math.inf)]
    bad = [(x, _rowtext.float_text(x)) for x in values if _rowtext.float_text(x) != float.__repr__(x)]
    assert not bad, bad[:5]
    with pytest.raises(TypeError):
        _rowtext.float_text("1.0")


def test_number_text_reads_as_json_does():
    rng = random.Random(17)
    tokens = ["0", "-0", "0.0", "-0.0", "1e400", "-1e400", "1e-400", "5e-324", "1.7976931348623157e308", "NaN",
              "Infinity", "-Infinity", "0.1", "9007199254740993", "9007199254740993.0", "1E5", "1e+05",
              "123456789012345678", "0.000100000000000000004792", "0." + "0" * 30 + "1", "1" + "0" * 30 + ".0",
              "99999999999999999999.5", "2.5000000000000000000000000001"]
    for _ in range(20000):
        bits = (rng.getrandbits(1) << 63) | (rng.randint(1023 - 30, 1023 + 60) << 52) | rng.getrandbits(52)
        tokens.append(repr(struct.unpack("<d", struct.pack("<Q", bits))[0]))
        tokens.append("%.*e" % (rng.randint(0, 20), rng.uniform(-1e6, 1e6)))
        tokens.append("%.*f" % (rng.randint(0, 25), rng.uniform(-100, 100)))
        tokens.append("%de%d" % (rng.randint(-10 ** 17, 10 ** 17), rng.randint(-40, 10)))
        tokens.append(str(rng.randint(-10 ** 18, 10 ** 18)))
    taken = 0
    for token in tokens:
        got = _rowtext.number_text(token)
        if got is None:  # handed back: the caller decodes the entry instead
            continue
        value = json.loads(token)
        assert got == (float.__repr__(value) if type(value) is float else int.__repr__(value)), token
        taken += 1
    assert taken > 0.9 * len(tokens)
    for bad in ["", "-", "01", "1.", ".5", "1e", "1e+", "+1", "nan", "inf", "0x10", "1_000", "--1", "1 "]:
        assert _rowtext.number_text(bad) is None, bad


def _dumps(rng: random.Random, entry) -> str:
    """The entry as a dump holds it: json.dump's own layouts (indents, separators)."""
    return json.dumps(entry, indent=rng.choice([None, 1, 2]), separators=rng.choice([None, (",", ":")]))


def _hostile_value(rng: random.Random):
    return rng.choice(_HOSTILE_FLOATS + [0, -1, 2 ** 63, 10 ** 20, -(10 ** 30), True, False, None, "x", [1], {}])


def _hostile_entry(rng: random.Random) -> dict:
    entry = _entry(rng, False)
    for key in ("input_args", "output"):
        for item in entry.get(key) or []:
            if isinstance(item, dict) and rng.random() < 0.3:
                item[rng.choice(["Max", "Min", "Mean", "Norm", "value", "requires_grad", "shape", "type"])] = \
                    _hostile_value(rng)
    if rng.random() < 0.1:
        entry["other"] = {"nested": [1, 2.5, None, {"deep": [True]}], "s": "t"}
    return entry


@pytest.mark.parametrize("plain", [True, False])
def test_raw_texts_match_general_path(monkeypatch, plain):
    """raw_texts reads the entry's JSON text itself: whatever it returns must be the general path's text of the
    decoded entry."""
    rng = random.Random(23 if plain else 29)
    taken = 0
    for _ in range(2000):
        name = rng.choice(_NAMES + ([] if plain else _HOSTILE_NAMES))
        entry = _entry(rng, True) if plain else _hostile_entry(rng)
        with_md5 = rng.random() < 0.2
        text = _dumps(rng, entry)
        got = _rowtext.raw_texts(name, text, with_md5)
        if got is None:
            continue
        taken += 1
        assert got == _general_texts(monkeypatch, name, json.loads(text), with_md5), (name, text)
    # handed back: parameters_grad names, md5 scalars, escaped (non-ASCII) kwarg names, nested arguments
    assert taken > (1000 if plain else 300)


def test_raw_texts_hand_back_what_the_decoder_must_judge(monkeypatch):
    """Broken, truncated, padded or unusual JSON is never rendered: None, and the caller decodes it (and reports
    a broken entry). Texts that do decode render as the general path does, or come back None."""
    rng = random.Random(31)
    name = "Torch.matmul.0.forward"
    base = json.dumps(_entry(random.Random(1), True), indent=1)
    unusual = [
        base + " ", " " + base, base + "x", base[:-1], "[]", "{", "", "null", "{}garbage",
        '{"input_args": [{"type": "int", "value": 1}], "input_args": []}',          # repeated key
        '{"input_kwargs": {"a": {"type": "int", "value": 1}, "a": {"type": "int", "value": 2}}}',
        '{"input_args": [{"type": "t\\u00e9", "value": 1}]}',                        # escapes in strings
        '{"input_args": [{"type": "int", "value": 1}],}',                            # trailing comma
        '{"input_args": [{"type": "int", "value": 01}]}',
        '{"input_args": [{"type": "int", "value": 12345678901234567890123}]}',      # big int
        '{"input_args": [{"type": "int", "value": 1}]}\x00',
        '{"x": ' + "[" * 100 + "]" * 100 + "}",                                     # deep nesting
        '{"input_args": [[{"type": "int", "value": 1}]]}',                           # nested argument
        '{"output": {"type": "int", "value": 1}}',
        '{"input_args": [{"type": "float", "value": NaN}, {"type": "float", "value": -Infinity}]}',
        '{"input_args": [{"value": 1e400, "type": "float"}]}',
        '{"input_args": [{"type": "int", "value": -0}], "output": []}',
        "{\"input_args\": [{\"type\": \"caf\u00e9\", \"value\": 1}]}",               # non-ASCII text
    ]
    for _ in range(300):  # random cuts and byte flips of a plain entry
        cut = rng.randrange(len(base))
        unusual.append(base[:cut] + rng.choice(["", "}", "]", ",", '"', "\\", "0", " "]) + base[cut + 1:])
    for text in unusual:
        got = _rowtext.raw_texts(name, text, False)
        try:
            entry = json.loads(text)
        except ValueError:
            assert got is None, text
            continue
        if got is not None:
            assert type(entry) is dict and text == text.strip()
            assert got == _general_texts(monkeypatch, name, entry, False), text
    # the ones the C code does take, for sure: NaN / Infinity tokens, overflow to inf, -0, any key order
    for text in ['{"input_args": [{"type": "float", "value": NaN}, {"type": "float", "value": -Infinity}]}',
                 '{"input_args": [{"value": 1e400, "type": "float"}]}',
                 '{"input_args": [{"type": "int", "value": -0}], "output": []}']:
        got = _rowtext.raw_texts(name, text, False)
        assert got is not None and got == _general_texts(monkeypatch, name, json.loads(text), False)
    # wrong types: handed back, never a crash
    for args in [(5, base, False), (name, b"{}", False), (name, None, False), (name, {"a": 1}, False)]:
        assert _rowtext.raw_texts(*args) is None
    with pytest.raises(TypeError):
        _rowtext.raw_texts(name, base)


class _Str(str):
    def __str__(self):
        return "renamed"


class _Dict(dict):
    pass


class _List(list):
    pass


def test_c_entry_texts_on_hostile_objects(monkeypatch):
    """Objects no JSON decoder makes (subclasses, non-str keys, big ints, non-ASCII fallback texts, wrong types):
    the C code renders them as the general path does, or hands them back."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 1.0, "Min": -1.0,
              "Mean": 0.0, "Norm": 2.0, "requires_grad": True}
    cases = [
        {"input_args": [dict(tensor, Max=2 ** 70)]},                       # an int past 64 bits
        {"input_args": [dict(tensor, shape=[True, 2])]},                   # a bool in the shape
        {"input_args": [dict(tensor, shape=(2, 3))]},                      # a tuple shape
        {"input_args": [dict(tensor, Max="caf\u00e9")]},                   # non-ASCII fallback text
        {"input_args": [dict(tensor, requires_grad="yes")]},
        {"input_args": [dict(tensor, type=_Str("torch.Tensor"))]},
        {"input_args": [{_Str("type"): "int", "value": 1}]},
        {"input_kwargs": {_Str("k"): {"type": "int", "value": 1}}},
        {"input_args": [{"type": "int", "value": 10 ** 30}, {"type": "bool", "value": True}]},
        {"input_args": [_Dict(tensor)]},
        {"input_args": _List([tensor])},
        {"input_kwargs": _Dict(a={"type": "int", "value": 1})},
        {"output": (tensor,)},
        {"input_args": [dict(tensor, Max=v) for v in _HOSTILE_FLOATS]},
        {"input_args": [{"type": "float", "value": v} for v in _HOSTILE_FLOATS]},
    ]
    for name in _NAMES[:3] + _HOSTILE_NAMES:
        for entry in cases:
            for with_md5 in (False, True):
                fast = rows_mod.node_texts(Node(name, "1"), entry, with_md5)
                assert fast == _general_texts(monkeypatch, name, entry, with_md5), (name, entry)
    assert fast_path.entry_texts(5, {"input_args": []}, False) is None
    assert fast_path.entry_texts("n", [1, 2], False) is None
    assert fast_path.entry_texts("n", _Dict(), False) is None
    with pytest.raises(TypeError):  # a fallback that does not give text
        _rowtext.entry_texts(lambda item, md5: 5, "n", {"input_args": [{"type": "x", "odd": 1}]}, False)

    class _Bad:
        def __bool__(self):
            raise ValueError("no truth")
    with pytest.raises(ValueError):
        fast_path.entry_texts("n", {}, _Bad())


def test_compare_fast_path_on_hostile_floats(monkeypatch):
    """The C compare slot (float_slot) against the general path on extreme statistics."""
    rng = random.Random(37)
    for _ in range(1500):
        def tensor():
            return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": rng.choice([[2, 3], [], [0]]),
                    "Max": rng.choice(_HOSTILE_FLOATS), "Min": rng.choice(_HOSTILE_FLOATS),
                    "Mean": rng.choice(_HOSTILE_FLOATS), "Norm": rng.choice(_HOSTILE_FLOATS),
                    "requires_grad": rng.choice([True, False, None])}
        de = {"input_args": [tensor()], "output": [tensor(), tensor()]}
        be = {"input_args": [tensor()], "output": [tensor(), tensor()]}
        name = rng.choice(_NAMES[:7] + _HOSTILE_NAMES)
        fast = compare_entries(name, de, name, be, "statistics", bench_texts=True)
        general = _general(monkeypatch, name, de, name, be, "statistics", bench_texts=True)
        assert repr(_fields(fast)) == repr(_fields(general)), (de, be)
    slot = _rowtext.float_slot("k", True, {"type": "t", "dtype": "d", "shape": [1], "Max": 1.0, "Min": 1.0,
                                           "Mean": 1.0, "Norm": 1.0, "requires_grad": True},
                               {"Max": 1.0, "Min": 1.0, "Mean": 1.0, "Norm": 0.0, "requires_grad": True})
    assert slot[4] is None and slot[5] == "True" and slot[8] is False
    assert _rowtext.float_slot("k", True, {"Max": 1.0}, {}) is None
    assert _rowtext.float_slot("k", True, [], {}) is None


def test_compare_fast_path_on_scalar_pairs(monkeypatch):
    """Every pair of awkward scalar values (ints at and past the exact range, zeros, NaN, inf, bools, mixed int and
    float), in inputs and outputs, against the general path."""
    values = [0, 1, -1, 7, 2 ** 52 - 1, -(2 ** 52 - 1), 2 ** 52, 2 ** 60, -(10 ** 20), 0.0, -0.0, 1.0, 2.5, -3.75,
              1e-300, 1e300, math.nan, math.inf, -math.inf, True, False]
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
              "Norm": 1.5, "requires_grad": False}
    for dv in values:
        for bv in values:
            de = {"input_args": [tensor, {"type": type(dv).__name__, "value": dv}],
                  "output": [{"type": type(dv).__name__, "value": dv}]}
            be = {"input_args": [dict(tensor, Norm=3.0), {"type": type(bv).__name__, "value": bv}],
                  "output": [{"type": type(bv).__name__, "value": bv}]}
            for name in ("Torch.add.0.forward", "Tensor.to.0.forward", "Distributed._all_gather_base.0.forward"):
                fast = compare_entries(name, de, name, be, "statistics", bench_texts=True)
                general = _general(monkeypatch, name, de, name, be, "statistics", bench_texts=True)
                assert repr(_fields(fast)) == repr(_fields(general)), (name, dv, bv)


def test_compare_fast_path_on_arguments_given_on_one_side_only(monkeypatch):
    """An argument one side alone gives (a keyword the other leaves out, None against a tensor, either way round)
    is compare.MSG_ONE_SIDED's error: the C and Python fast paths hand such pairs to the general path (C took a
    debug None against a bench tensor, and a bench-only keyword, as passes)."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
              "Norm": 1.5, "requires_grad": False}
    word = {"type": "str", "value": "tanh"}
    for d_args, d_kwargs, b_args, b_kwargs in [
            ([tensor], {"approximate": word}, [tensor], {}), ([tensor], {}, [tensor], {"approximate": word}),
            ([tensor, None], {}, [tensor, tensor], {}), ([tensor, tensor], {}, [tensor, None], {}),
            ([tensor], {}, [tensor, {"type": "int", "value": 3}], {})]:
        de = {"input_args": d_args, "input_kwargs": d_kwargs, "output": [tensor]}
        be = {"input_args": b_args, "input_kwargs": b_kwargs, "output": [dict(tensor, Norm=1.5001)]}
        for name in ("Functional.gelu.0.forward", "Torch.empty.0.forward"):
            fast = compare_entries(name, de, name, be, "statistics", bench_texts=True)
            general = _general(monkeypatch, name, de, name, be, "statistics", bench_texts=True)
            assert repr(_fields(fast)) == repr(_fields(general)), (de, be)
            exempt = name == "Torch.empty.0.forward"    # (uninitialised memory's API: no node rules at all)
            assert fast.precision == (0 if exempt else 1) and fast.inputs_ok, (name, de, be)
            assert ("given on one side only" in fast.input_text + fast.output_text) is not exempt


def test_an_argument_is_one_sided_only_where_both_calls_recorded_theirs(monkeypatch):
    """Where the rule does not apply (a review's finds): a matched bench node without data (a list or scope
    filter's construct entry) or whose inputs data_mode left out made every debug argument one-sided, an error;
    the same value given by position on one side and by keyword on the other was an error; a backward record's
    gradient that is None on one side is no argument."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
              "Norm": 1.5, "requires_grad": False}
    word = {"type": "str", "value": "none"}
    de = {"input_args": [tensor, word], "input_kwargs": {}, "output": [tensor]}
    cases = [("Functional.gelu.0.forward", de, None), ("Functional.gelu.0.forward", de, {}),
             ("Functional.gelu.0.forward", de, {"output": [tensor]}),
             ("Functional.gelu.0.forward", de, {"input_args": [tensor], "input_kwargs": {"approximate": word},
                                                "output": [tensor]}),
             ("Functional.linear.0.forward", {"input_args": [tensor, tensor, tensor], "output": [tensor]},
              {"input_args": [tensor, tensor], "input_kwargs": {"bias": tensor}, "output": [tensor]}),
             ("Functional.linear.0.backward", {"input": [tensor, None], "output": [tensor]},
              {"input": [tensor, tensor], "output": [tensor]}),
             ("Functional.linear.0.backward", {"input": [tensor, tensor], "output": [tensor]},
              {"input": [tensor, None], "output": [tensor]})]
    for name, d, b in cases:
        fast = compare_entries(name, d, name, b, "statistics", bench_texts=True)
        general = _general(monkeypatch, name, d, name, b, "statistics", bench_texts=True)
        assert repr(_fields(fast)) == repr(_fields(general)), (name, d, b)
        assert "given on one side only" not in fast.input_text + fast.output_text, (name, d, b)
        assert fast.precision != 1, (name, d, b)


def test_bare_values_in_arguments_are_a_clear_error():
    """A dump wraps every argument in an item object; a bare number or string inside an argument list is a broken
    dump: one clear error (it was a TypeError from deep inside), whichever path meets it."""
    from tbprobe.errors import TbprobeError
    for entry in ({"input_args": [[5]]}, {"input_args": [[{"type": "int", "value": 1}, "x"]]},
                  {"input_kwargs": {"a": [1.5]}}, {"output": [[True]]}):
        with pytest.raises(TbprobeError, match="bare"):
            rows_mod.node_texts(Node("Torch.a.0.forward", "1"), entry, False)
        with pytest.raises(TbprobeError, match="bare"):
            compare_entries("Torch.a.0.forward", entry, "Torch.a.0.forward", entry, "statistics", bench_texts=True)
        assert _rowtext.raw_texts("Torch.a.0.forward", json.dumps(entry), False) is None


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_raw_texts_of_stored_entry_texts(tmp_path, monkeypatch, ensure_ascii):
    """raw_texts(..., stored=True) reads the text as the dump reader keeps it (`name": {...}`, hostile names
    included): the same texts as from the bare object, or None (a non-ASCII name: the caller decodes)."""
    from tbprobe.formats.dump_json import load_dump

    rng = random.Random(37)
    data = {}
    for i in range(600):
        name = rng.choice(_NAMES + _HOSTILE_NAMES).replace(".0.", f".{i}.")
        if not ensure_ascii and "\ud800" in name:
            continue  # a lone surrogate cannot be written as UTF-8
        data[name] = _entry(rng, True) if rng.random() < 0.7 else _hostile_entry(rng)
    path = tmp_path / "dump.json"
    doc = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=ensure_ascii), encoding="utf-8")
    entries = load_dump(path).entries
    same = escaped = 0
    for name in entries:
        with_md5 = rng.random() < 0.2
        stored = entries.stored(name)
        got = _rowtext.raw_texts(name, stored, with_md5, True)
        plain = _rowtext.raw_texts(name, entries.raw(name), with_md5)
        if got is None:
            assert plain is None or not stored.isascii(), stored
            continue
        same += 1
        escaped += "\\" in stored[:stored.index(": {")]
        assert got == plain == _general_texts(monkeypatch, name, entries[name], with_md5), stored
    assert same > (150 if ensure_ascii else 80) and escaped > 20


def test_raw_texts_stored_form_broken_is_handed_back():
    """A stored text without the name's closing quote or the colon is handed back, never read past its end."""
    body = '{"input_args": [{"type": "int", "value": 1}]}'
    name = "Torch.add.0.forward"
    good = _rowtext.raw_texts(name, body, False)
    assert good is not None
    for stored, ok in [('Torch.add.0.forward": ' + body, True), ('x" \n:\t' + body, True),
                       ('a\\"b": ' + body, True), ('a\\\\": ' + body, True),
                       ("no quote " + body, False), ('x" ' + body, False), ('x":', False), ('x"', False),
                       ("x\\", False), ("\\", False), ("", False), ('a\\": ' + body, False)]:
        got = _rowtext.raw_texts(name, stored, False, True)
        assert got == (good if ok else None), stored
    assert _rowtext.raw_texts(name, body, False, False) == good
    with pytest.raises(TypeError):
        _rowtext.raw_texts(name, body, False, True, 1)
