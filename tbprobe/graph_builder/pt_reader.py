"""Reading a tensor saved by `torch.save` (the zip format) straight into numpy, without importing torch.

Importing torch costs seconds in every worker process of a tensor-mode compare, and torch.load then copies
the data once more; the file itself is a zip holding a small pickle (which storage, offset, shape, strides)
and the raw little-endian storage bytes. The pickle is read with an unpickler that knows only the few names a
plain tensor needs, so nothing else can run (the same guarantee as torch.load(weights_only=True)); anything
else (legacy files, other objects, complex, quantized or sparse tensors) returns None, and the caller falls
back to torch.load."""
import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import BinaryIO, Optional, Union

import numpy as np

__all__ = ["read_pt", "PtRefused"]

# storage class -> numpy dtype of its bytes ("bfloat16" is widened to float32 below: exact, as torch does)
_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": "bfloat16", "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class _Unsupported(Exception):
    pass


_LOCAL_HEADER = b"PK\x03\x04"


class PtRefused(ValueError):
    """A .pt file tbprobe does not read, neither itself nor through torch.load; the message says why (a record
    shorter than its tensor, a compressed archive its own reader does not take)."""


_MAX_PICKLE = 1 << 20   # a tensor's data.pkl is a few hundred bytes; a bigger one is no plain tensor


def _record(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """At most `limit` bytes of a record, from its start: what the tensor needs, never the whole record, whatever
    size it declares or inflates to (a 1 MB file whose deflated record inflates to 1 GB, behind a [3, 4]
    tensor, took 2.1 GB). A stored (uncompressed) record, as torch.save writes them, is read straight from the
    file at its offset, without zipfile's CRC-32 pass and chunked copies (4 MB: 2.7 -> 0.9 ms here; torch.load's
    own reader does not check CRC-32 either: PyTorch builds miniz with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS);
    no more than the file holds is asked for. Anything else (compressed, encrypted, an unexpected header, a
    short file) is streamed through zipfile, which stops at `limit`. A missing record raises KeyError."""
    info = archive.getinfo(name)
    want = max(0, min(info.file_size, limit))
    fp = archive.fp
    if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1 and fp is not None:
        fp.seek(info.header_offset)
        head = fp.read(30)
        if len(head) == 30 and head[:4] == _LOCAL_HEADER:
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            end = fp.seek(0, io.SEEK_END)
            fp.seek(start)
            data = fp.read(max(0, min(want, end - start)))
            if len(data) == want:
                return data
    with archive.open(name) as f:
        return f.read(want)


class _StorageType:
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype


class _Storage:
    """A storage record not read yet: the tensor that uses it says how many of its bytes it needs."""
    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype):
        self.name = name
        self.dtype = dtype


def _tensor_of(archive: zipfile.ZipFile, storage, offset, size, stride) -> np.ndarray:
    if not isinstance(storage, _Storage):
        raise _Unsupported("storage")
    dtype = storage.dtype
    shape = tuple(int(s) for s in size)
    if any(s < 0 for s in shape) or int(offset) < 0:
        raise _Unsupported("negative size")
    count = 1
    for s in shape:
        count *= s
    # only the layout torch.save gives a contiguous tensor: C order from `offset`
    expected, acc = [], 1
    for s in reversed(shape):
        expected.append(acc)
        acc *= s
    if tuple(int(s) for s in stride) != tuple(reversed(expected)) and count > 1:
        raise _Unsupported("strided tensor")
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    need = (int(offset) + count) * itemsize
    data = _record(archive, storage.name, need)
    if len(data) < need:
        raise PtRefused(f"its storage record {storage.name.rsplit('/', 1)[-1]} holds {len(data)} bytes where "
                              f"its tensor of shape {list(shape)} needs {need}")
    data = memoryview(data)[int(offset) * itemsize:need]
    if dtype == "bfloat16":
        raw = np.frombuffer(data, dtype="<u2")
        flat = (raw.astype(np.uint32) << 16).view(np.float32)
    else:
        flat = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))
    return flat.reshape(shape)


class _Reader(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self.archive = archive
        self.prefix = prefix

    def _rebuild_tensor_v2(self, storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
        return _tensor_of(self.archive, storage, offset, size, stride)

    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return self._rebuild_tensor_v2
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise _Unsupported(f"{module}.{name}")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and
                isinstance(pid[1], _StorageType)):
            raise _Unsupported("storage record")
        return _Storage(f"{self.prefix}data/{pid[2]}", pid[1].dtype)


def read_pt(path: Union[str, BinaryIO]) -> Optional[np.ndarray]:
    """The tensor in `path` (a file name or an open binary file) as a numpy array (its own dtype; bfloat16 as
    float32), or None when the file needs torch.load. A missing file raises FileNotFoundError; PtRefused a record
    too short for its tensor, or a compressed archive (torch.save writes none) that this reader does not take:
    torch.load would inflate its records whole. No more of a record is read than its tensor needs."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        return None
    with archive:
        value = _read_archive(archive)
        if not isinstance(value, np.ndarray):
            if any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist()):
                raise PtRefused("a compressed archive (torch.save writes none) that tbprobe's own reader does not "
                                "take; not handed to torch.load, which would inflate its records whole")
            return None
    return value


def _read_archive(archive: zipfile.ZipFile):
    names = archive.namelist()
    pkl = next((n for n in names if n == "data.pkl" or n.endswith("/data.pkl")), None)
    if pkl is None or archive.getinfo(pkl).file_size > _MAX_PICKLE:
        return None
    prefix = pkl[: -len("data.pkl")]
    order = prefix + "byteorder"
    if order in names and _record(archive, order, 16) != b"little":
        return None
    try:
        return _Reader(_record(archive, pkl, _MAX_PICKLE), archive, prefix).load()
    except PtRefused:
        raise
    except (_Unsupported, pickle.UnpicklingError, ValueError, TypeError, KeyError, EOFError, AttributeError,
            IndexError, OverflowError, zipfile.BadZipFile):
        return None
