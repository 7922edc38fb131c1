"""Bad input: each broken dump.json / construct.json / stack.json / side file gives one message that names the file
and the problem (the .vis.db and layout cases are in test_vis_db.py and test_dump_dir.py)."""
import pytest

from tbprobe.errors import FormatError, TbprobeError
from tbprobe.formats import dump_json
from tbprobe.formats.construct_json import load_construct
from tbprobe.formats.dump_json import load_dump
from tbprobe.formats.stack_json import load_stack
from tbprobe.formats.vis_config import load_legend, load_matches
from tbprobe.formats.vis_json import load_vis_json

from .conftest import REF

SRC = REF / "inputs/npu_stat/step0/rank0"
DUMP = (SRC / "dump.json").read_bytes()
HEAD = b'{"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null, '

DUMP_CASES = {
    "truncated_in_string": (DUMP[:5000], "truncated JSON: the file ends before the data is complete (Unterminated string)"),
    "truncated_in_number": (DUMP[: DUMP.index(b"2.825500") + 3],
                            "truncated JSON: the file ends before the data is complete (Expecting ',' delimiter)"),
    "truncated_at_end": (DUMP[:-3], "truncated JSON: the file ends before the data is complete"),
    "not_utf8": (DUMP[:3000] + b"\xff\xfe" + DUMP[3000:], "not UTF-8 text (byte 0xff at offset 3000)"),
    "latin1": ('{"data": {"Modulé": {}}}'.encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 16)"),
    "empty": (b"", "empty file"),
    "top_list": (b"[1, 2]", "invalid JSON at line 1 column 1: a dump.json must be a JSON object, found '['"),
    "data_list": (HEAD + b'"data": []}', '"data" must be an object of entries, found a list'),
    "entry_string": (HEAD + b'"data": {\n  "a": {},\n  "b": "x"\n}}',
                     'invalid JSON at line 3 column 8: entry "b" must be an object, found a string'),
    "task_number": (b'{"task": 3, "data": {}}', '"task" must be a string, found a number'),
    "dump_data_dir_list": (b'{"dump_data_dir": [], "data": {}}', '"dump_data_dir" must be a string, found a list'),
    "no_data": (b'{"task": "statistics"}', 'not a dump.json: no "data" object'),
    "syntax": (b'{"data": {\n  "a": {"x": tru}}}', "invalid JSON at line 2 column"),
    "extra_data": (b'{"data": {}} x', "invalid JSON at line 1 column 14: extra data after the top-level object"),
    # Python's words before ("Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits()")
    "long_int": (HEAD + b'"x": -' + b"7" * 5000 + b', "data": {}}',
                 "invalid JSON at line 1 column 91: a number too long (5000 digits; tbprobe reads integers of up to "
                 "4300 digits)"),
}


@pytest.mark.parametrize("block", [1 << 22, 16])
@pytest.mark.parametrize("case", sorted(DUMP_CASES))
def test_bad_dump_json(tmp_path, monkeypatch, case, block):
    monkeypatch.setattr(dump_json, "_BLOCK", block)
    data, expected = DUMP_CASES[case]
    p = tmp_path / "dump.json"
    p.write_bytes(data)
    with pytest.raises(FormatError) as e:
        load_dump(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: {expected}"), msg
    assert "\n" not in msg and isinstance(e.value, TbprobeError)


def test_a_number_too_long_in_an_entry(tmp_path):
    """Read when used (lazy) or at load: the message says what is wrong in the file's terms, and where."""
    p = tmp_path / "dump.json"
    p.write_bytes(HEAD + b'"data": {\n  "a": {"input_args": [{"type": "int", "value": ' + b"9" * 5001 + b'}]},\n'
                  b'  "b": {}\n}}')
    with pytest.raises(FormatError) as e:
        load_dump(p).entries["a"]
    assert str(e.value) == (f'{p}: entry "a": invalid JSON at character 41 of the entry: a number too long (5001 '
                            'digits; tbprobe reads integers of up to 4300 digits)')
    with pytest.raises(FormatError) as e:
        load_dump(p, lazy=False)
    assert str(e.value) == (f"{p}: invalid JSON at line 2 column 49: a number too long (5001 digits; tbprobe reads "
                            "integers of up to 4300 digits)")


def test_missing_and_folder_dump_json(tmp_path):
    with pytest.raises(FormatError) as e:
        load_dump(tmp_path / "dump.json")
    assert str(e.value) == f"{tmp_path / 'dump.json'}: missing dump.json"
    with pytest.raises(FormatError) as e:
        load_dump(tmp_path)
    assert str(e.value) == f"{tmp_path}: expected dump.json, found a folder"


SMALL_CASES = {
    "truncated": (lambda src: src.read_bytes()[:300], "truncated JSON: the file ends before the data is complete"),
    "not_utf8": (lambda src: b'{"\xff": null}', "not UTF-8 text (byte 0xff at offset 2)"),
    "empty": (lambda src: b"  \n", "empty "),
    "syntax": (lambda src: b'{"a": nul}', "invalid JSON at line 1 column 7: Expecting value"),
    # (a ValueError traceback before)
    "long_int": (lambda src: b'{"a": 1.5,\n "b": [2, ' + b"1" * 4301 + b']}',
                 "invalid JSON at line 2 column 11: a number too long (4301 digits; tbprobe reads integers of up to "
                 "4300 digits)"),
}


@pytest.mark.parametrize("case", sorted(SMALL_CASES))
@pytest.mark.parametrize("name,loader", [("construct.json", load_construct), ("stack.json", load_stack)])
def test_bad_construct_and_stack_files(tmp_path, case, name, loader):
    make, expected = SMALL_CASES[case]
    p = tmp_path / name
    p.write_bytes(make(SRC / name))
    with pytest.raises(FormatError) as e:
        loader(p)
    assert str(e.value).startswith(f"{p}: {expected}"), str(e.value)


@pytest.mark.parametrize("text,expected", [
    (b"[]", "construct.json must be an object of child -> parent, found list"),
    (b'{"a": 3}', 'parent of "a" must be a name, null or [name, micro_step], found 3'),
    (b'{"a": ["p", "x"]}', "\"a\": expected [parent, micro_step], found ['p', 'x']"),
    (b'{"megatron_micro_step_number": "2"}', "\"megatron_micro_step_number\" must be an integer, found '2'"),
])
def test_wrongly_typed_construct(tmp_path, text, expected):
    p = tmp_path / "construct.json"
    p.write_bytes(text)
    with pytest.raises(FormatError) as e:
        load_construct(p)
    assert str(e.value) == f"{p}: {expected}"


@pytest.mark.parametrize("text,expected", [
    (b"[]", "stack.json must be an object, found list"),
    (b'{"a": 3}', '"a": stack lines must be a list of strings, found 3'),
    (b'{"0": [["a"], [1]]}', 'stack "0": stack lines must be a list of strings, found [1]'),
    (b'{"0": [["a"], []], "1": ["x"]}', 'stack "1": expected [[names], [lines]], found [\'x\']'),
    (b'{"0": [[7], []]}', 'stack "0": node names must be strings, found 7'),
])
def test_wrongly_typed_stack(tmp_path, text, expected):
    p = tmp_path / "stack.json"
    p.write_bytes(text)
    with pytest.raises(FormatError) as e:
        load_stack(p)
    assert str(e.value) == f"{p}: {expected}"


def test_missing_construct_and_stack(tmp_path):
    for name, loader in (("construct.json", load_construct), ("stack.json", load_stack)):
        with pytest.raises(FormatError) as e:
            loader(tmp_path / name)
        assert str(e.value) == f"{tmp_path / name}: missing {name}"


def test_bad_side_files(tmp_path):
    cfg = tmp_path / "build_0_0.vis.config"
    cfg.write_text('{"a": 1}')
    with pytest.raises(FormatError, match='match of "a" must be a node name'):
        load_matches(cfg)
    legend = tmp_path / "x.vis.db.legend.json"
    legend.write_text("[1]")
    with pytest.raises(FormatError, match="a legend must be an object"):
        load_legend(legend)
    vis = tmp_path / "old.vis"
    vis.write_text('{"Bench": {}}')
    with pytest.raises(FormatError) as e:
        load_vis_json(vis)
    assert str(e.value) == f'{vis}: not a .vis graph file: no "NPU" graph'
