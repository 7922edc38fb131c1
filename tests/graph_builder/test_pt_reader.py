"""read_pt (tensor files without torch) must give exactly what torch.load gives, and hand anything unusual back
to torch.load (None)."""
import numpy as np
import pytest
import torch

from tbprobe.graph_builder import metrics, tensor_files
from tbprobe.graph_builder.pt_reader import read_pt


def _torch_array(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.to(torch.float64).numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
@pytest.mark.parametrize("shape", [(), (0,), (1,), (5,), (3, 4), (2, 3, 4), (4, 0, 2)])
def test_same_values_as_torch(tmp_path, dtype, shape):
    gen = torch.Generator().manual_seed(hash((str(dtype), shape)) % 1000)
    t = (torch.randn(shape, generator=gen) * 50).to(dtype)
    if dtype.is_floating_point and t.numel() > 2:
        t.view(-1)[0] = float("nan")
        t.view(-1)[1] = float("-inf")
    path = tmp_path / "t.pt"
    torch.save(t, path)
    arr = read_pt(str(path))
    assert arr is not None
    got = np.asarray(arr, dtype=np.float64)
    want = _torch_array(t)
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(tensor_files.load_array(str(path)), want, equal_nan=True)


def test_views_and_offsets(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    cases = {"slice": base[2:4], "row": base[3], "narrow": base[:, 2:5], "transposed": base.t(),
             "element": base[1, 1]}
    for name, t in cases.items():
        path = tmp_path / f"{name}.pt"
        torch.save(t, path)
        arr = read_pt(str(path))
        # torch.save keeps the whole storage: strided views are handed back to torch, offsets are read here
        if arr is None:
            assert not t.is_contiguous(), name
        else:
            assert np.array_equal(arr, t.numpy()), name
        assert np.array_equal(tensor_files.load_array(str(path)), _torch_array(t.contiguous())), name


def test_other_objects_go_back_to_torch(tmp_path):
    torch.save({"a": torch.ones(2)}, tmp_path / "dict.pt")
    torch.save(torch.ones(2, dtype=torch.complex64), tmp_path / "complex.pt")
    (tmp_path / "text.pt").write_text("not a zip")
    for name in ("dict.pt", "complex.pt", "text.pt"):
        assert read_pt(str(tmp_path / name)) is None
    with pytest.raises(FileNotFoundError):
        read_pt(str(tmp_path / "missing.pt"))
    # the metric of a complex tensor still works through torch (magnitudes)
    assert np.array_equal(tensor_files.load_array(str(tmp_path / "complex.pt")), np.ones(2))


def test_tensor_metrics_unchanged_without_torch(tmp_path, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(1000, generator=gen)
    b = a + 1e-3 * torch.randn(1000, generator=gen)
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    fast = metrics.tensor_metrics(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"))
    import tbprobe.graph_builder.pt_reader as pr
    monkeypatch.setattr(pr, "read_pt", lambda path: None)
    slow = metrics.tensor_metrics(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"))
    assert fast == slow
    assert fast[0]["Cosine"] != "N/A"


def _rezip(src, dst, compression):
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))


def test_records_read_in_place_or_through_zipfile(tmp_path):
    """Stored records are read at their offset (no CRC-32 pass, as torch.load); a compressed archive goes through
    zipfile and gives the same values; a truncated file is handed back (None) or fails, never read short."""
    import zipfile

    t = torch.randn(300, 7, generator=torch.Generator().manual_seed(3))
    stored = tmp_path / "stored.pt"
    torch.save(t, stored)
    want = _torch_array(t)
    assert np.array_equal(np.asarray(read_pt(str(stored)), dtype=np.float64), want)
    deflated = tmp_path / "deflated.pt"
    _rezip(stored, deflated, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(deflated) as z:
        assert any(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    assert np.array_equal(np.asarray(read_pt(str(deflated)), dtype=np.float64), want)
    data = stored.read_bytes()
    with zipfile.ZipFile(stored) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    # the central directory still promises the whole record, but the record's bytes stop half way
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[:info.header_offset + 100] + data[info.header_offset + 100 + 4 * 1050:])
    try:
        arr = read_pt(str(cut))
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    assert arr is None or not np.array_equal(np.asarray(arr, dtype=np.float64), want)


def _bomb(path, inflated: int, tensor: torch.Tensor) -> None:
    """`tensor` saved, its storage record replaced by `inflated` bytes of zeros, deflated (about 1/220 of that)."""
    import io
    import zipfile

    buf = io.BytesIO()
    torch.save(tensor, buf)
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for info in src.infolist():
            if info.filename.endswith("/data/0"):
                with z.open(info.filename, "w", force_zip64=True) as w:
                    chunk = bytes(1 << 24)
                    for _ in range(inflated >> 24):
                        w.write(chunk)
            else:
                z.writestr(info.filename, src.read(info.filename))


def test_a_zip_bomb_is_read_only_as_far_as_its_tensor_needs(tmp_path):
    """A 1 MB .pt whose record inflates to 256 MB behind a [3, 4] tensor: 48 bytes are read (the whole record
    was, 2.1 GB of memory for a 1 GB one); one that this reader hands back (a strided view) is not given to
    torch.load either, which inflates it whole."""
    import tracemalloc

    path = tmp_path / "bomb.pt"
    _bomb(path, 256 << 20, torch.zeros(3, 4))
    assert path.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        arr = read_pt(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert arr is not None and arr.shape == (3, 4) and not arr.any()
    assert peak < 4 << 20, peak
    assert metrics.tensor_metrics(str(path), str(path))[1] is None
    strided = tmp_path / "strided.pt"
    _bomb(strided, 64 << 20, torch.zeros(4, 3).t())
    fields, msg = metrics.tensor_metrics(str(strided), str(strided))
    assert fields["MaxAbsErr"] == "N/A"
    assert msg == ("warning: cannot read tensor data: strided.pt: a compressed archive (torch.save writes none) that "
                   "tbprobe's own reader does not take; not handed to torch.load, which would inflate its records "
                   "whole")


def test_a_record_shorter_than_its_tensor_is_refused(tmp_path):
    import zipfile

    good = tmp_path / "good.pt"
    torch.save(torch.ones(3, 4), good)
    short = tmp_path / "short.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(short, "w") as z:
        for info in src.infolist():
            data = src.read(info.filename)
            z.writestr(info.filename, data[:16] if info.filename.endswith("/data/0") else data)
    fields, msg = metrics.tensor_metrics(str(short), str(good))
    assert msg == ("warning: cannot read tensor data: short.pt: its storage record 0 holds 16 bytes where its tensor "
                   "of shape [3, 4] needs 48")


def test_an_npy_declaring_more_than_it_holds_is_refused_before_allocating(tmp_path):
    """np.load allocates the array its header declares before reading: a 128-byte file asked for 8 TB."""
    from numpy.lib import format as npy

    huge = tmp_path / "huge.npy"
    with open(huge, "wb") as f:
        npy.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 6, 10 ** 6)})
    assert huge.stat().st_size == 128
    np.save(tmp_path / "ok.npy", np.ones(3))
    _, msg = metrics.tensor_metrics(str(huge), str(tmp_path / "ok.npy"))
    assert msg == ("warning: cannot read tensor data: huge.npy: declares an array of shape [1000000, 1000000] and "
                   "dtype float64 (8000000000000 bytes) but holds 0 bytes of data")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _, msg = metrics.tensor_metrics(str(tmp_path / "obj.npy"), str(tmp_path / "ok.npy"))
    assert msg == "warning: cannot read tensor data: obj.npy: holds Python objects (a pickle), which tbprobe does not unpickle"
    assert metrics.tensor_metrics(str(tmp_path / "ok.npy"), str(tmp_path / "ok.npy"))[1] is None


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_pickles_are_not_unpickled_and_say_so_in_one_line(tmp_path):
    """A legacy (non-zip) .pt went to torch.load, which printed a multi-line UserWarning about its pickle
    protocol on stderr and put its several paragraphs of "Weights only load failed..." into the row. Now: no
    warning, one short line, and nothing in the file runs."""
    import pickle
    import warnings
    import zipfile

    marker = tmp_path / "ran"
    torch.save(torch.ones(3, 4), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "evil_legacy.pt").write_bytes(pickle.dumps(_Payload(marker), protocol=4))
    with zipfile.ZipFile(tmp_path / "evil_zip.pt", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(_Payload(marker)))
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    torch.save({"a": torch.ones(2)}, tmp_path / "dict.pt")
    (tmp_path / "text.pt").write_text("not a tensor")
    torch.save(torch.ones(3, 4), tmp_path / "ok.pt")
    why = {
        "legacy.pt": "legacy.pt is a legacy pickle, which tbprobe does not unpickle (torch.save's zip format since "
                     "torch 1.6 is read)",
        "evil_legacy.pt": "evil_legacy.pt is a legacy pickle, which tbprobe does not unpickle (torch.save's zip "
                          "format since torch 1.6 is read)",
        "evil_zip.pt": "evil_zip.pt holds objects other than a tensor, which tbprobe does not unpickle",
        "dict.pt": "dict.pt holds a dict, not a tensor",
        "text.pt": "text.pt is not a tensor file (neither torch.save's zip format nor .npy)",
    }
    for name, text in why.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fields, msg = metrics.tensor_metrics(str(tmp_path / name), str(tmp_path / "ok.pt"))
        assert [str(w.message) for w in caught] == [], name
        assert msg == f"warning: cannot read tensor data: {text}", name
        assert fields["Cosine"] == "N/A"
    assert not marker.exists()
