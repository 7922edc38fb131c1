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


@pytest.mark.parametrize("write_files", IMPLS)
def test_unchanged_file_is_a_link_to_the_last_one_while_that_is_intact(tmp_path, write_files):
    a, b, c, d = (str(tmp_path / n) for n in ("a.json", "b.json", "c.json", "d.json"))
    (ident,) = write_files((), [(a, b"same", None)])
    assert ident == writer._identity(os.stat(a))
    assert write_files((), [(b, b"same", None, (a,) + ident)]) == [ident]
    assert os.stat(b).st_ino == os.stat(a).st_ino and os.stat(a).st_nlink == 2
    # the source changed since (a user's edit): written afresh, the edit not copied, and a new identity returned
    with open(a, "wb") as f:
        f.write(b"edited")
    (new,) = write_files((), [(c, b"same", None, (a,) + ident)])
    assert open(c, "rb").read() == b"same" and os.stat(c).st_ino != os.stat(a).st_ino
    assert new == writer._identity(os.stat(c))
    # the source is gone: written afresh
    os.unlink(c)
    write_files((), [(d, b"same", None, (c,) + new)])
    assert open(d, "rb").read() == b"same"


@pytest.mark.parametrize("write_files", IMPLS)
def test_writing_over_a_link_never_changes_the_other_name(tmp_path, write_files):
    """A run restarted into the same dump_path writes over files that may be links to another step's."""
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    (ident,) = write_files((), [(a, b"step0", None)])
    write_files((), [(b, b"step0", None, (a,) + ident)])
    write_files((), [(b, b"other", None)])
    assert open(a, "rb").read() == b"step0" and open(b, "rb").read() == b"other"


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError):
        c_write_files(["a"], [])
    with pytest.raises(TypeError):
        c_write_files((), [("a", "text, not bytes", None)])
    with pytest.raises(TypeError):
        c_write_files((), [("a", b"x")])
    with pytest.raises(TypeError):   # a link source comes with its identity
        c_write_files((), [("a", b"x", None, ("b",))])
    with pytest.raises(TypeError):   # and only for a file written in place
        c_write_files((), [("a", b"x", "a.tmp", ("b", 1, 2, 3, 4))])


@pytest.mark.parametrize("path", ["table", "sse4.2"])
def test_masked_crc32c_is_tensorboards(path):
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboards

    from tbprobe.collector import _cwrite

    if path == "sse4.2" and _cwrite.crc32c_path(None) != "sse4.2":
        pytest.skip("this processor has no SSE4.2")
    before = _cwrite.crc32c_path(path)
    try:
        for n in [*range(0, 40), 255, 4097]:   # every tail length, and longer runs
            data = os.urandom(n)
            assert _cwrite.masked_crc32c(data) == tensorboards(data), n
    finally:
        _cwrite.crc32c_path(before)
    with pytest.raises(ValueError):
        _cwrite.crc32c_path("crc")


def test_health_events_are_readable_while_training_runs(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(events, "FLUSH_SECS", 0.0)   # every step reaches the file at once
    h = events.HealthEvents(str(tmp_path / "dump"))
    for step in range(3):
        h.write("rank0", step, {"records": 10.0 + step, "max_abs": 1.5})
    h.write("rank0", 3, {"records": 13.0, "hook_errors": 2.0})   # other tags: the kept Event is made anew
    acc = EventAccumulator(os.path.join(events.events_dir(str(tmp_path / "dump")), "rank0"))
    acc.Reload()   # before close
    assert [(e.step, e.value) for e in acc.Scalars("tbprobe/records")] == [(0, 10.0), (1, 11.0), (2, 12.0),
                                                                         (3, 13.0)]
    assert [e.step for e in acc.Scalars("tbprobe/max_abs")] == [0, 1, 2]
    assert [(e.step, e.value) for e in acc.Scalars("tbprobe/hook_errors")] == [(3, 2.0)]
    h.close()
    (name,) = os.listdir(os.path.join(events.events_dir(str(tmp_path / "dump")), "rank0"))
    assert name.startswith("events.out.tfevents.")


def test_steps_share_unchanged_side_files_and_never_a_changed_one(tmp_path):
    """A steady loop's stack/construct/dataflow files are links to the last step's; a step that calls the model
    twice has its own, with its own text, and the next step links to nothing older than the last step (whose text
    differs); dump.json is always a file of its own."""
    import torch
    from conftest import make_debugger, rank_dirs
    from run_model import build, collected_step

    dbg = make_debugger(tmp_path, level="L0", steps=5)
    model, data, loss_fn = build("gpt")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        twice = (lambda x: model(x) + model(x)) if step == 2 else None
        collected_step(dbg, model, opt, loss_fn, *data[step % 4], forward=twice)
        dbg.step()
    dbg.close()

    ranks = []
    for step in range(5):
        (d,) = rank_dirs(str(tmp_path / "dump"), step)
        ranks.append(d)
    for name in ("stack.json", "construct.json", "dataflow.json"):
        inode = [os.stat(os.path.join(d, name)).st_ino for d in ranks]
        assert inode[0] == inode[1] and inode[3] == inode[4] and len({inode[0], inode[2], inode[3]}) == 3, name
        text = [open(os.path.join(d, name), "rb").read() for d in ranks]
        assert text[0] == text[1] == text[3] == text[4] != text[2], name
    assert len({os.stat(os.path.join(d, "dump.json")).st_ino for d in ranks}) == 5
    assert "Module.blocks.0.Block.forward.1" in open(os.path.join(ranks[2], "construct.json")).read()
