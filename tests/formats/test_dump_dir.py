"""Dump directory layouts (REFERENCE.md section 1) and their error messages."""
import shutil
from pathlib import Path

import pytest

from tbprobe.errors import FormatError
from tbprobe.formats.dump_dir import discover

from .conftest import REF

NPU_STAT = REF / "inputs/npu_stat/step0/rank0"


def make_rank(folder: Path, construct: bool = True) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(NPU_STAT / "dump.json", folder / "dump.json")
    if construct:
        shutil.copy(NPU_STAT / "construct.json", folder / "construct.json")
        shutil.copy(NPU_STAT / "stack.json", folder / "stack.json")
    return folder


def summary(rank_dirs):
    return [(rd.step, rd.rank, rd.label) for rd in rank_dirs]


def test_reference_folder_of_steps():
    found = discover(REF / "inputs/npu_dist")
    assert summary(found) == [(0, 0, "rank0"), (0, 1, "rank1")]
    assert found[1].dump_json == REF / "inputs/npu_dist/step0/rank1/dump.json"
    assert found[1].construct_json.name == "construct.json" and found[1].stack_json.name == "stack.json"


def test_reference_step_folder_and_rank_folder_and_file():
    assert summary(discover(REF / "inputs/npu_dist/step0")) == [(0, 0, "rank0"), (0, 1, "rank1")]
    assert summary(discover(REF / "inputs/npu_dist/step0/rank1")) == [(0, 1, "rank1")]
    assert summary(discover(REF / "inputs/npu_dist/step0/rank1/dump.json")) == [(0, 1, "rank1")]


def test_single_folder_without_construct_and_stack():
    found = discover(REF / "collector/statistics_md5_L1_step0")
    assert summary(found) == [(0, 0, "statistics_md5_L1_step0")]
    assert found[0].construct_json is None and found[0].stack_json is None


def test_multi_step_multi_rank_sorted_numerically(tmp_path):
    for step in (10, 2):
        for rank in (11, 3):
            make_rank(tmp_path / "dump" / f"step{step}" / f"rank{rank}")
    (tmp_path / "dump" / "notes").mkdir()  # unrelated folders are ignored
    assert summary(discover(tmp_path / "dump")) == [
        (2, 3, "rank3"), (2, 11, "rank11"), (10, 3, "rank3"), (10, 11, "rank11")]


def test_proc_folders(tmp_path):
    make_rank(tmp_path / "step0" / "proc4242")
    assert summary(discover(tmp_path)) == [(0, 0, "proc4242")]
    assert summary(discover(tmp_path / "step0")) == [(0, 0, "proc4242")]
    # two processes without torch.distributed: distinct ranks in pid order
    make_rank(tmp_path / "step0" / "proc999")
    assert summary(discover(tmp_path)) == [(0, 0, "proc999"), (0, 1, "proc4242")]


def test_proc_next_to_known_ranks(tmp_path):
    make_rank(tmp_path / "step1" / "rank0")
    make_rank(tmp_path / "step1" / "proc77")
    assert summary(discover(tmp_path)) == [(1, 0, "rank0"), (1, 1, "proc77")]


def test_bare_rank_folder(tmp_path):
    make_rank(tmp_path / "step3" / "rank", construct=False)
    assert summary(discover(tmp_path)) == [(3, 0, "rank")]
    assert summary(discover(tmp_path / "step3" / "rank")) == [(3, 0, "rank")]


def test_results_are_deterministic(tmp_path):
    for rank in range(12):
        make_rank(tmp_path / "step0" / f"rank{rank}", construct=False)
    first = discover(tmp_path)
    assert [rd.rank for rd in first] == list(range(12))
    assert discover(tmp_path) == first


# --------------------------------------------------------------------------------------------- bad input
def test_missing_folder(tmp_path):
    with pytest.raises(FormatError) as e:
        discover(tmp_path / "nope")
    assert str(e.value) == f"{tmp_path / 'nope'}: no such folder"


def test_unknown_layout(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(FormatError) as e:
        discover(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}: unknown dump layout: expected dump.json here, rank*/proc* folders")


def test_rank_folder_without_dump_json(tmp_path):
    make_rank(tmp_path / "step0" / "rank0")
    (tmp_path / "step0" / "rank1").mkdir()
    with pytest.raises(FormatError) as e:
        discover(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'step0' / 'rank1'}: no dump.json in this rank folder")


def test_a_level_debug_dump_is_named_as_such(tmp_path):
    rank = tmp_path / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "debug.json").write_text('{"task": "statistics", "level": "debug", "data": {}}')
    with pytest.raises(FormatError) as e:
        discover(tmp_path)
    assert str(e.value) == (f"{rank}: only debug.json here: a level-debug dump holds save()'d values, not a model "
                            "graph (collect at L0, L1 or mix to build one)")


def test_step_folders_without_ranks(tmp_path):
    (tmp_path / "step0").mkdir()
    with pytest.raises(FormatError) as e:
        discover(tmp_path)
    assert "no rank folder with a dump.json found" in str(e.value)


def test_other_file_given(tmp_path):
    f = tmp_path / "construct.json"
    f.write_text("{}")
    with pytest.raises(FormatError, match="expected a dump folder or a dump.json, found another file"):
        discover(f)


def test_two_folders_claim_rank_zero(tmp_path):
    make_rank(tmp_path / "step0" / "rank")
    make_rank(tmp_path / "step0" / "rank0")
    with pytest.raises(FormatError, match="two folders claim rank 0"):
        discover(tmp_path)
