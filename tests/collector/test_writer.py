"""The writer's file layer (write_files, in C and in Python) and the health event files."""
import errno
import os

import pytest

from tbprobe.collector import events, writer
from tbprobe.collector._cwrite import write_files as c_write_files

IMPLS = [pytest.param(c_write_files, id="c"), pytest.param(writer._write_files_py, id="python")]


@pytest.mark.parametrize("write_files", IMPLS)
def test_folders_and_files_in_one_call(tmp_path, write_files):
    step, rank = str(tmp_path / "step0"), str(tmp_path / "step0" / "rank0")
    big = os.urandom(3 << 20)   # more than one write() may take
    files = [(os.path.join(rank, "stack.json"), b"{}", None),
             (os.path.join(rank, "big.bin"), big, None),
             (os.path.join(rank, "dump.json"), b'{"data": {}}', os.path.join(rank, "dump.json.tmp-1"))]
    write_files((step, rank), files)
    assert sorted(os.listdir(rank)) == ["big.bin", "dump.json", "stack.json"]   # no temporary file left
    assert (tmp_path / "step0" / "rank0" / "big.bin").read_bytes() == big
    assert (tmp_path / "step0" / "rank0" / "dump.json").read_bytes() == b'{"data": {}}'
    # again over the same folders and files (a run restarted into the same dump_path): replaced, not appended
    write_files((step, rank), [(os.path.join(rank, "stack.json"), b"[1]", None)])
    assert (tmp_path / "step0" / "rank0" / "stack.json").read_bytes() == b"[1]"


@pytest.mark.parametrize("write_files", IMPLS)
def test_first_failure_is_an_oserror_naming_the_path(tmp_path, write_files):
    missing = str(tmp_path / "gone" / "rank0")
    with pytest.raises(OSError) as err:
        write_files((missing,), [])
    assert err.value.errno == errno.ENOENT and err.value.filename == missing
    rank = tmp_path / "r"
    rank.mkdir()
    (rank / "dump.json").mkdir()   # the rename onto it fails
    with pytest.raises(OSError) as err:
        write_files((), [(str(rank / "a.json"), b"1", None),
                         (str(rank / "dump.json"), b"2", str(rank / "dump.json.tmp-1")),
                         (str(rank / "never.json"), b"3", None)])
    assert err.value.filename == str(rank / "dump.json")
    assert sorted(os.listdir(rank)) == ["a.json", "dump.json"]   # the temporary file removed, nothing after it


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError):
        c_write_files(["a"], [])
    with pytest.raises(TypeError):
        c_write_files((), [("a", "text, not bytes", None)])
    with pytest.raises(TypeError):
        c_write_files((), [("a", b"x")])


def test_health_events_are_readable_while_training_runs(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(events, "FLUSH_SECS", 0.0)   # every step reaches the file at once
    h = events.HealthEvents(str(tmp_path / "dump"))
    for step in range(3):
        h.write("rank0", step, {"records": 10.0 + step, "max_abs": 1.5})
    acc = EventAccumulator(os.path.join(events.events_dir(str(tmp_path / "dump")), "rank0"))
    acc.Reload()   # before close
    assert [(e.step, e.value) for e in acc.Scalars("tbprobe/records")] == [(0, 10.0), (1, 11.0), (2, 12.0)]
    h.close()
    (name,) = os.listdir(os.path.join(events.events_dir(str(tmp_path / "dump")), "rank0"))
    assert name.startswith("events.out.tfevents.")
