"""`tbprobe inspect`: what a dump directory or graph database holds, and one-line errors for bad input."""
import os

import pytest

from tbprobe.cli import main

from .conftest import OWN, REF


def run(capsys, *argv):
    code = main(["inspect", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_dump_dir(capsys):
    code, out, err = run(capsys, REF / "inputs/npu_dist")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].endswith("2 rank folder(s), steps [0], ranks [0, 1]")
    assert lines[2].split() == ["0", "0", "rank0", "statistics", "mix", "19", "17", "7"]
    assert lines[3].split() == ["0", "1", "rank1", "statistics", "mix", "19", "17", "7"]


def test_inspect_single_folder_with_validate(capsys):
    code, out, _ = run(capsys, REF / "collector/statistics_xor_L1_step0", "--validate")
    assert code == 0
    assert out.splitlines()[2].split() == ["0", "0", "statistics_xor_L1_step0", "statistics", "L1", "16", "-", "-"]


def test_inspect_db(capsys, ref_db_copies):
    code, out, _ = run(capsys, ref_db_copies["multi"])
    assert code == 0
    lines = out.splitlines()
    assert "compare graph, task summary, written by msprobe" in lines[0]
    assert lines[1].startswith("steps [0, 1], ranks [0, 1], micro steps 1, overflow check on, 104 stack record(s)")
    assert [line.split() for line in lines[3:5]] == [["0", "0", "NPU", "48"], ["0", "0", "Bench", "44"]]
    assert len(lines) == 3 + 8


def test_inspect_legacy_vis_and_matches(capsys, tmp_path):
    code, out, _ = run(capsys, OWN / "sample.vis")
    assert code == 0 and "NPU 3 nodes, Bench 2 nodes" in out
    cfg = tmp_path / "compare_1_0_0.vis.config"
    cfg.write_text('{"a": "b", "c": "d"}')
    code, out, _ = run(capsys, cfg)
    assert code == 0 and out.strip().endswith("2 pair(s)")


@pytest.mark.parametrize("make,expected", [
    (lambda d: d / "missing", "no such file or folder"),
    (lambda d: d, "unknown dump layout"),
    (lambda d: _write(d / "x.vis.db", os.urandom(4096)), "not a readable SQLite database (file is not a database)"),
    (lambda d: _write(d / "step0" / "rank0" / "dump.json", b'{"data": {"a": '), "truncated JSON"),
])
def test_inspect_bad_input_is_one_line(capsys, tmp_path, make, expected):
    target = make(tmp_path)
    code, out, err = run(capsys, target)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tbprobe: error: ") and expected in err
    assert "Traceback" not in err


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
