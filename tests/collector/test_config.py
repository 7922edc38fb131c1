import glob
import json
import os

import pytest

from tbprobe.collector.config import load_config, parse_config
from tbprobe.errors import TbprobeError

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "msprobe-26.2.0")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(FIXTURES, "collector", "*", "config.json"))
                                        + glob.glob(os.path.join(FIXTURES, "inputs", "*_config*.json"))))
def test_reference_configs_are_accepted(path):
    cfg = load_config(path)
    with open(path) as f:
        raw = json.load(f)
    assert cfg.task == raw["task"]
    assert cfg.level == raw.get("level", "L1")
    assert list(cfg.steps) == sorted(raw.get("step", []))


@pytest.mark.parametrize("raw, words", [
    ({"task": "statistics", "levle": "L1"}, "'levle'"),
    ({"level": "L3"}, "level"),
    ({"task": "nope"}, "task"),
    ({"step": "0"}, "step"),
    ({"step": [-1]}, "step"),
    ({"rank": ["3-1"]}, "rank"),
    ({"async_dump": "yes"}, "async_dump"),
    ({"statistics": {"summary_mode": "sha"}}, "summary_mode"),
    ({"statistics": {"data_mode": ["sideways"]}}, "data_mode"),
    ({"statistics": {"scope": ["only.one"]}}, "scope"),
    ({"statistics": {"lists": []}}, "statistics.lists"),
    ({"risk_level": "MOST"}, "risk_level"),
    ({"task": "overflow_check"}, "not supported"),
    ({"step": ["0-30000000"]}, "at most 1000000"),        # (it was expanded: 2.7 GB and 6 s)
    ({"step": ["\u00b2-3"]}, "invalid entry"),             # (a superscript digit: a traceback from int())
    ({"rank": ["1-2x"]}, "invalid entry"),
    ({"level": "L0", "statistics": {"scope": ["Functional.linear.0.forward", "Module.fc.Linear.forward"]}},
     "module's record name"),                               # (the scope selected nothing, without a word)
    ({"level": "L1", "statistics": {"scope": ["Module.fc.Linear.forward.0", "Module.fc.Linear.forward.0"]}},
     "operator's record name"),
    ({"level": "mix", "statistics": {"scope": ["fc.forward", "Module.fc.Linear.forward.0"]}}, "'fc.forward'"),
    # given and empty is not the default, as msprobe refuses them (the dump went to ./tbprobe_dump, without a word)
    ({"dump_path": ""}, "dump_path"),
    ({"dump_path": None}, "dump_path"),
    ({"task": ""}, "task"),
    ({"level": None}, "level"),
    ({"statistics": {"data_mode": ["all", "forward"]}}, "'all' cannot be combined"),   # ("all" won)
    ({"step": ["3-"]}, "invalid entry"),
])
def test_bad_config_is_one_clear_error(raw, words):
    with pytest.raises(TbprobeError) as info:
        parse_config(raw)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_ranges_defaults_and_risk_level():
    cfg = parse_config({"rank": [0, "4-6"], "step": [3, 1], "statistics": {"list": ["linear"]}})
    assert cfg.ranks == (0, 4, 5, 6)
    assert cfg.steps == (1, 3)
    # a number written as a string, as msprobe takes it ("3" or "3-5", its own error says)
    named = parse_config({"rank": ["0"], "step": ["3", " 5 ", "7-8"]})
    assert named.ranks == (0,) and named.steps == (3, 5, 7, 8)
    assert cfg.level == "L1" and cfg.summary_mode == "statistics"
    assert cfg.effective_risk_level == "ALL"          # a list was given
    assert parse_config({}).effective_risk_level == "FOCUS"
    assert parse_config({"risk_level": "CORE"}).effective_risk_level == "CORE"


@pytest.mark.parametrize("block", [{"list": ["add"]}, {"scope": ["Tensor.add.0.forward", "Tensor.mul.0.forward"]}])
def test_scope_or_list_selects_by_name_whatever_the_risk_level(block, caplog):
    # as msprobe's DataCollector.should_collect: CORE with a scope whose first call is not CORE recorded nothing
    cfg = parse_config({"level": "L1", "risk_level": "CORE", "statistics": block})
    assert cfg.effective_risk_level == "ALL"
    assert "risk_level CORE is not used" in caplog.text and ("scope" if "scope" in block else "list") in caplog.text
    caplog.clear()
    assert parse_config({"level": "L1", "risk_level": "ALL", "statistics": block}).effective_risk_level == "ALL"
    assert parse_config({"level": "L1", "statistics": block}).effective_risk_level == "ALL"
    assert "risk_level" not in caplog.text


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(TbprobeError, match="not found"):
        load_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TbprobeError, match="not a readable JSON"):
        load_config(str(bad))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(TbprobeError, match="nested too deep"):
        load_config(str(deep))


def test_debugger_raises_at_construction(tmp_path):
    from tbprobe import PrecisionDebugger

    p = tmp_path / "c.json"
    p.write_text(json.dumps({"task": "statistics", "level": "L9"}))
    with pytest.raises(TbprobeError):
        PrecisionDebugger(config_path=str(p))
    # explicit arguments override the file
    d = PrecisionDebugger(dump_path=str(tmp_path / "d"), level="L0", task="structure", step=[0])
    assert d.config.level == "L0" and d.config.task == "structure" and d.config.steps == (0,)
    for bad in ({"task": ""}, {"level": ""}, {"dump_path": ""}):    # (each once meant the default)
        with pytest.raises(TbprobeError, match=next(iter(bad))):
            PrecisionDebugger(**{"dump_path": str(tmp_path / "e"), **bad})


def test_config_check_command(tmp_path):
    import subprocess
    import sys

    good = os.path.join(FIXTURES, "inputs", "npu_stat_config.json")
    ok = subprocess.run([sys.executable, "-m", "tbprobe", "config", "check", good], capture_output=True, text=True)
    assert ok.returncode == 0 and "ok (task statistics, level mix" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task": "statistics", "statistics": {"summary_mode": "sha256"}}))
    out = subprocess.run([sys.executable, "-m", "tbprobe", "config", "check", str(bad)], capture_output=True,
                         text=True)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "summary_mode" in out.stderr
    # the command does not need torch
    probe = subprocess.run([sys.executable, "-c", "import sys, tbprobe.collector.cli, tbprobe.collector.config; "
                            "print('torch' in sys.modules)"], capture_output=True, text=True)
    assert probe.stdout.strip() == "False"


# msprobe's own config.json (26.2.0's package ships it) and the older template's blocks of its other tasks
MSPROBE_SHIPPED = {"task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1",
                   "extra_info": True, "async_dump": False,
                   "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
                   "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
                   "acc_check": {"white_list": [], "black_list": [], "error_data_path": "./"}}


@pytest.mark.parametrize("extra", [{}, {"overflow_check": {"overflow_nums": 1, "check_mode": "all"}},
                                   {"free_benchmark": {"fuzz_device": "npu", "pert_mode": "improve_precision"}},
                                   {"run_ut": {"white_list": [], "black_list": []}},
                                   {"grad_probe": {"grad_level": "L1", "bounds": [-1, 0, 1]}},
                                   {"diff_check": {"list": []}}, {"nan_check": {}}])
def test_msprobes_config_files_with_blocks_of_its_other_tasks_are_accepted(extra):
    """tbprobe refused msprobe's shipped config.json (`acc_check.black_list: unknown key`): a block of a task that
    is not the collector's holds that task's keys, and msprobe ignores it too. The chosen task's block is still
    checked key by key, and a block must still be an object."""
    cfg = parse_config(dict(MSPROBE_SHIPPED, **extra))
    assert cfg.task == "statistics" and cfg.level == "L1"
    with pytest.raises(TbprobeError, match="statistics.lists"):
        parse_config(dict(MSPROBE_SHIPPED, statistics={"lists": []}, **extra))
    with pytest.raises(TbprobeError, match="acc_check: must be a JSON object"):
        parse_config(dict(MSPROBE_SHIPPED, acc_check=[]))
    with pytest.raises(TbprobeError, match=r"'diff_check' is not supported"):
        parse_config(dict(MSPROBE_SHIPPED, task="diff_check"))


@pytest.mark.parametrize("level, becomes", [("L1", "mix"), ("debug", "mix"), ("L0", "L0"), ("mix", "mix")])
def test_task_structure_records_at_l0_or_mix_as_msprobe(level, becomes, caplog):
    """msprobe turns any other level into mix for task structure, with a warning (an L1 structure held no modules
    in tbprobe, a debug one nothing)."""
    cfg = parse_config({"task": "structure", "level": level})
    assert cfg.level == becomes
    assert ("becomes mix" in caplog.text) == (level != becomes)
    caplog.clear()
    assert parse_config({"task": "structure"}).level == "mix" and "becomes" not in caplog.text   # (its default)


def test_a_dump_path_held_by_a_file_is_refused_when_the_debugger_is_made(tmp_path):
    """An existing regular file as dump_path (or a file above it) was taken at construction and by `tbprobe config
    check`; start() then said 'not writable (File exists)'."""
    import subprocess
    import sys

    from tbprobe import PrecisionDebugger

    afile = tmp_path / "afile"
    afile.write_text("x")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(afile), "step": [0]}))
    with pytest.raises(TbprobeError) as err:
        PrecisionDebugger(config_path=str(cfg))
    assert str(err.value) == f"config dump_path: {afile} is an existing file, not a folder"
    with pytest.raises(TbprobeError) as err:
        PrecisionDebugger(dump_path=str(afile / "dump"), level="L1", step=[0])
    assert str(err.value) == f"config dump_path: {afile / 'dump'}: {afile} is a file, not a folder"
    out = subprocess.run([sys.executable, "-m", "tbprobe", "config", "check", str(cfg)], capture_output=True,
                         text=True)
    assert out.returncode == 2 and out.stderr == f"tbprobe: error: config dump_path: {afile} is an existing file, " \
                                                 "not a folder\n"
    # a folder, or a path not made yet, is taken as before
    assert parse_config({"dump_path": str(tmp_path)}).dump_path == str(tmp_path)
    assert parse_config({"dump_path": str(tmp_path / "new" / "dump")}).dump_path == str(tmp_path / "new" / "dump")


def test_a_config_path_that_is_a_folder_or_a_fifo_says_so(tmp_path):
    with pytest.raises(TbprobeError) as err:
        load_config(str(tmp_path))
    assert str(err.value) == f"{tmp_path}: a folder, not a config file"
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(TbprobeError) as err:
        load_config(str(fifo))    # (never opened: it would block)
    assert str(err.value) == f"{fifo}: not a regular file (a FIFO, a device or a socket)"
