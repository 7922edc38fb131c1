"""Entry decoding with orjson (when installed) must give exactly the json module's result: the same dict (key
order, value types, float bits, the last of repeated keys) or, for an entry the json module refuses, the same
FormatError. The builder's row texts are made from these dicts, so any difference would change output bytes."""
import json
import math
import random
import struct

import pytest

from tbprobe.errors import FormatError
from tbprobe.formats import dump_json

pytest.importorskip("orjson")


def _both(monkeypatch, text: str):
    """(orjson path result, json module result), each a repr or the error message."""
    out = []
    for use in (dump_json._orjson, None):
        with monkeypatch.context() as m:
            m.setattr(dump_json, "_orjson", use)
            try:
                out.append(repr(dump_json.decode_entry("dump.json", "n", 'n": ' + text)))
            except FormatError as exc:
                out.append("error: " + str(exc))
    return out


_HOSTILE = [
    '{"x": 1234567890123456789}', '{"x": -12345678901234567890123}', '{"x": [18446744073709551616]}',
    '{"x": 9223372036854775807, "y": -9223372036854775808}', '{"x": 1e400}', '{"x": -1e400}', '{"x": 1e-400}',
    '{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{"x": "\\ud800"}', '{"x": "\\ud83d\\ude00"}',
    '{"a": 1, "b": 2, "a": 3}', '{"x": -0}', '{"x": -0.0}', '{"x": 1E5, "y": 1.5e+2, "z": 0.1e1}',
    '{"x": 0.00123456789012345678901}', '{"x": 1e18446744073709551617}', '{"x": 1.}', '{"x": .5}',
    '{"x": 01}', '{"x": +1}', '{"x": [1, 2,]}', '{"x": "a\tb"}', '{"x": "caf\u00e9 \\u00e9"}', '[1, 2]',
    '{"x": 1} ', '{"x": ' + "[" * 3000 + "]" * 3000 + '}', '{"x": 1}}', '{"x": tru}', '{"x": "\\x"}',
    '{"x": ' + "1" * 400 + '}', '{"x": 2.2250738585072011e-308, "y": 4.9e-324, "z": 1.7976931348623158e308}',
]


@pytest.mark.parametrize("text", _HOSTILE)
def test_hostile_entries_decode_the_same(monkeypatch, text):
    fast, ref = _both(monkeypatch, text)
    assert fast == ref


def test_random_numbers_decode_the_same(monkeypatch):
    rng = random.Random(5)
    texts = []
    for _ in range(3000):
        x = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if not math.isfinite(x):
            continue
        y = rng.uniform(-0.01, 0.01)
        texts.append('{"a": [%r, %.17g, %.20e, %.15g], "b": %.25g}' % (x, x, x, y, y))
    taken = 0
    for text in texts:
        fast, ref = _both(monkeypatch, text)
        assert fast == ref, text
        taken += not fast.startswith("error")
    assert taken > 2500


def test_dump_entries_decode_the_same(monkeypatch):
    """Entries as the collector and the reference write them (indented), with the numbers the bench uses."""
    rng = random.Random(9)
    for _ in range(300):
        item = {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [4096, rng.randint(0, 9), 5120],
                "Max": rng.uniform(0.5, 8.0), "Min": -rng.uniform(0.5, 8.0), "Mean": rng.uniform(-0.05, 0.05),
                "Norm": rng.uniform(10.0, 900.0), "requires_grad": rng.random() < 0.5}
        entry = {"input_args": [item, {"type": "int", "value": rng.randint(-5, 5)}],
                 "input_kwargs": {"alpha": {"type": "float", "value": rng.random()}}, "output": [item, None]}
        text = json.dumps(entry, indent=rng.choice([None, 1, 4]))
        fast, ref = _both(monkeypatch, text)
        assert fast == ref and not fast.startswith("error")
