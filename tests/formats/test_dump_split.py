"""The C split of dump.json's "data" object (_dump_split.split_members) against the Python loop it stands in for.

The Python loop of _dump_parse._split_members is the oracle: with split_members made to take nothing, every
piece goes through it. With the C path on, the stored entries (names, texts, order) and any error message and
its position must be exactly the same, on plain, hostile, randomly cut and randomly flipped texts."""
import json
import random
from pathlib import Path

import pytest

from tbprobe.errors import FormatError
from tbprobe.formats import _dump_parse, dump_json
from tbprobe.formats._dump_parse import SEP
from tbprobe.formats._dump_split import split_members
from tbprobe.formats._json_stream import Stream
from tbprobe.formats.dump_json import load_dump


def _python_only(buf, start, end, raw):
    return start  # the C path takes nothing: the Python loop does every piece


def _outcome(text: str, start: int, cut: int, c_path: bool):
    """(entries as a list, error message) of _split_members over text[start:cut]."""
    s = Stream(Path("dump.json"), None)
    s.buf, s.eof = text, True
    raw: dict = {}
    saved = _dump_parse.split_members
    _dump_parse.split_members = split_members if c_path else _python_only
    try:
        _dump_parse._split_members(s, start, cut, raw)
        err = None
    except FormatError as exc:
        err = str(exc)
    finally:
        _dump_parse.split_members = saved
    return list(raw.items()), err


def _same_both_ways(text: str, start: int, cut: int):
    c = _outcome(text, start, cut, True)
    py = _outcome(text, start, cut, False)
    assert c == py, (text[start:cut][:200], c[1], py[1])
    return c


NAMES = ["Torch.matmul.0.forward", "Module.a.b.Linear.forward.0", "", "a", "with space", 'quote\\"in',
         "back\\\\slash", "tab\\there", "uni\\u00e9", "é-latin1", "✓-wide", "ctl\x01x", "new\nline", "x" * 300]
VALUES = ['{}', '{"a": 1}', '{"input_args": [{"type": "torch.Tensor", "Max": 1.5}]}', '{"s": "}"}',
          '{"s": "\\"},\\n  \\""}', '{"unbalanced": [', '{', '}', '[1]', '"str"', '{"x": {"y": {}}}', '{"a": "é"}']
LAYOUTS = ['": ', '":', '" : ', '":\n ', '": ']


def _entries_text(rng: random.Random, n: int) -> str:
    parts = []
    for _ in range(n):
        name = rng.choice(NAMES[:3]) + str(rng.randrange(100)) if rng.random() < 0.6 else rng.choice(NAMES)
        layout = LAYOUTS[0] if rng.random() < 0.8 else rng.choice(LAYOUTS)
        value = VALUES[rng.randrange(3)] if rng.random() < 0.7 else rng.choice(VALUES)
        parts.append(name + layout + value)
    return '"' + SEP.join(parts)


def test_plain_reference_text_is_taken_whole():
    doc = {f"Torch.op.{i}.forward": {"input_args": [{"type": "int", "value": i}], "output": []} for i in range(50)}
    doc["Torch.op.3.forward"] = {"dup": True}  # a name seen twice keeps its first place, last value
    text = json.dumps({"data": doc}, indent=1)
    start = text.index('"', text.index("{", 1))
    cut = text.rindex(SEP)
    raw: dict = {}
    assert split_members(text, start + 1, cut, raw) is None
    assert list(raw) == list(doc)[:-1]
    assert {k: json.loads(v[v.index("{"):]) for k, v in raw.items()} == {k: doc[k] for k in raw}
    _same_both_ways(text, start, cut)


@pytest.mark.parametrize("seed", range(40))
def test_varied_and_hostile_texts_match_the_python_loop(seed):
    rng = random.Random(seed)
    text = _entries_text(rng, rng.randrange(1, 30))
    _same_both_ways(text, 0, len(text))


@pytest.mark.parametrize("seed", range(30))
def test_random_cuts_and_byte_flips_match_the_python_loop(seed):
    rng = random.Random(1000 + seed)
    text = _entries_text(rng, 20)
    alphabet = '"\\{}[],: \n\x01\x7fé✓a0'
    for _ in range(30):
        t = list(text)
        for _ in range(rng.randrange(0, 4)):
            t[rng.randrange(len(t))] = rng.choice(alphabet)
        t = "".join(t)
        start = rng.randrange(len(t))
        cut = rng.randrange(start, len(t) + 1)
        _same_both_ways(t, start, cut)
        # the C call alone: a piece start within the range, and only whole plain pieces stored
        raw: dict = {}
        off = split_members(t, start + 1, cut, raw)
        assert off is None or start + 1 <= off <= max(cut, start + 1)
        for name, piece in raw.items():
            assert piece.startswith(name + '": {') and piece.endswith("}") and piece in t[start:cut]


def test_cut_inside_a_separator_and_at_the_edges():
    text = '"a": {}' + SEP + 'b": {}' + SEP + 'c": {}'
    for cut in range(len(text) + 1):
        for start in range(0, cut + 1, 3):
            _same_both_ways(text, start, cut)
    raw: dict = {}
    assert split_members(text, 1, 1, raw) == 1 and raw == {}  # an empty range: the Python loop reports it
    assert split_members(text + SEP, 1, len(text) + len(SEP), raw) == len(text) + len(SEP)  # an empty last piece
    assert list(raw) == ["a", "b", "c"]


def test_wide_text_goes_to_the_python_loop():
    text = '"✓": {}' + SEP + 'b": {}'
    raw: dict = {}
    assert split_members(text, 1, len(text), raw) == 1 and raw == {}
    assert _same_both_ways(text, 0, len(text))[0] == [("✓", '✓": {}'), ("b", 'b": {}')]


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):
        split_members(b'"a": {}', 0, 1, {})
    with pytest.raises(TypeError):
        split_members('"a": {}', 0, 1)
    with pytest.raises(ValueError):
        split_members('a": {}', 0, 99, {})
    assert split_members('a": {}', 4, 2, {}) == 4  # start past end: the Python loop's empty piece
    with pytest.raises(ValueError):
        split_members('a": {}', -1, 2, {})


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("block", [64, 1 << 20])
def test_whole_files_with_flips_load_the_same(tmp_path, monkeypatch, seed, block):
    """load_dump (lazy) of a flipped reference-layout file: the same entries or the same error either way."""
    rng = random.Random(seed)
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
           "data": {f"Torch.op.{i}.forward": {"input_args": [{"type": "float", "value": i / 7}]} for i in range(40)}}
    text = json.dumps(doc, indent=1)
    data_at = text.index('"data"')
    t = list(text)
    for _ in range(rng.randrange(1, 4)):
        t[rng.randrange(data_at + 12, len(t) - 4)] = rng.choice('"\\{}:, \n\x01é')
    p = tmp_path / "dump.json"
    p.write_text("".join(t), encoding="utf-8")
    monkeypatch.setattr(dump_json, "_BLOCK", block)

    def outcome(c_path: bool):
        monkeypatch.setattr(_dump_parse, "split_members", split_members if c_path else _python_only)
        try:
            entries = load_dump(p).entries
            return [(k, entries.stored(k)) for k in entries], None
        except FormatError as exc:
            return None, str(exc)

    assert outcome(True) == outcome(False)
