"""Tensor statistics: CPU tensors at once by a C kernel, others on their device, read back in batches.

A CPU tensor of a common dtype is summarised in one pass over its memory by tbprobe/collector/_cstats.c
(`StatBuffer.fill`: the item gets its seven statistics at once). On any other device (and for float64, complex,
precision "low" halves), `StatBuffer.add`: each summarised tensor becomes four 0-dim device tensors [Max, Min, Mean, Norm] from three kernels with grad
off; they are stacked once per batch and moved to the host once per step. A tensor seen twice unmodified (same
object, same _version) is summarised once. NaN/Inf counts are exactly 0 when Max/Min are finite; otherwise, and
for the zero count, they are counted at the step's end from the live tensor (when it is still alive and
unmodified) instead of paying more kernels on every tensor.
"""
import math
import weakref
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from tbprobe.collector._cstats import HostItems
from tbprobe.collector._cstats import crc32_at as _crc32_at
from tbprobe.collector._cstats import summarise_into as _summarise_into
from tbprobe.collector.pytorch.odd_tensors import ROW_KEYS

try:   # the same items with the tensor's facts read in C++ (built against the installed torch; see setup.py)
    from tbprobe.collector._cgrad import ItemReader as _ItemReader
except ImportError:
    _ItemReader = None

__all__ = ["StatBuffer", "tensor_checksum", "tensor_xor", "is_summarisable"]

_BATCH = 2048
_grad_enabled = torch.is_grad_enabled
_F32 = torch.float32
_aminmax = torch.aminmax
_vector_norm = torch.linalg.vector_norm
_set_grad = torch._C._set_grad_enabled
_HALF = (torch.float16, torch.bfloat16)
_LANE32 = (torch.float32, torch.float16, torch.bfloat16)
_dot = torch.dot
_DOT_MIN = 1 << 14
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_Parameter = torch.nn.Parameter
_STRIDED = torch.strided
# dtypes the one-pass host kernel reads (tbprobe/collector/_cstats.c), by its kind code
_HOST_KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int64: 3, torch.int32: 4, torch.bool: 5}
_FLOAT_KINDS_MAX = 2   # the float kinds (float32, float16, bfloat16) are 0-2: the pass reads their views in place
# precision "low" keeps half statistics in the half dtype: torch's path
_HOST_KINDS_LOW = {k: v for k, v in _HOST_KINDS.items() if k not in _HALF}
# Below this size a second pass of the host kernel costs less than remembering the first (a weak reference and a
# cache entry per tensor); above it, a tensor seen twice unmodified is summarised once.
_HOST_CACHE_MIN = 1 << 14
_ITEM_KEYS = ("Max", "Min", "Mean", "Norm", "zero_count", "nan_count", "inf_count")


def is_summarisable(t: torch.Tensor) -> bool:
    """False for tensors without data: empty, meta, fake/functional tensors."""
    if t.numel() == 0 or t.is_meta:
        return False
    if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        name = type(t).__name__
        if name in ("FakeTensor", "FunctionalTensor"):
            return False
    return True


def _scalars(t: torch.Tensor, low: bool = False) -> List[torch.Tensor]:
    """[Max, Min, Sum, Norm] of `t` as four 0-dim device tensors: aminmax, sum and vector_norm (three kernels;
    the stacking of all of a step's scalars is one more kernel per batch, not per tensor). The Sum becomes the Mean
    by one division per batch (`_merge`): torch's own float32 mean is that sum divided by numel, bit for bit, and
    a sum kernel costs less than half a mean kernel on small tensors.

    Callers hold no_grad. Max/Min keep the tensor's dtype (converted exactly when stacked); Mean/Norm of
    integer, half and float64 tensors are computed in float32, as REFERENCE.md s1 says (config precision "high").
    With precision "low", half tensors' Sum and Norm stay in their own dtype (cheaper on an accelerator, and
    they can round or overflow: what "low" asks for)."""
    t0 = t
    dt = t.dtype
    if dt == torch.float32:
        if t.dim() == 0:
            # the reference writes the value itself for all four statistics of a 0-dim tensor: a copy of it, as the
            # batch is read at step end and the tensor may change before (an optimizer's step count, `t += 1`)
            c = t.clone()
            return [c, c, c, c]
        mn, mx = torch.aminmax(t)
        return [mx, mn, t.sum(), torch.linalg.vector_norm(t)]
    if dt == torch.bool:
        t = t.to(torch.float32)
        return [t.amax(), t.amin(), t.sum(), torch.linalg.vector_norm(t)]
    if t.is_complex():
        t = t.abs()
        dt = t.dtype
    if t.dim() == 0:
        c = t.clone() if t is t0 else t   # (abs() made a new tensor already)
        return [c, c, c, c]
    mn, mx = torch.aminmax(t)
    if low and dt in _HALF:
        # the Mean itself, in the dtype (StatBuffer.add divides it by 1): a half sum overflows long before the
        # mean does (65536 values of 2.0)
        return [mx, mn, t.mean(), torch.linalg.vector_norm(t)]
    if dt in _HALF:
        # accumulated in float32 without a float32 copy of the tensor
        return [mx, mn, t.sum(dtype=torch.float32), torch.linalg.vector_norm(t, dtype=torch.float32)]
    tf = t if dt is torch.float64 else t.to(torch.float32)
    # torch's float32 norm on the CPU is off by 1e-4 on a few million values (float64 tensors, images as uint8):
    # accumulated in float64 there, then rounded (an accelerator's float32 reduction is accurate)
    norm = torch.linalg.vector_norm(tf, dtype=torch.float64) if t.is_cpu else torch.linalg.vector_norm(tf)
    return [mx, mn, tf.sum(dtype=torch.float32), norm.float()]


class StatBuffer:
    """Statistics for one step: `fill` completes a CPU tensor's item at once; `add` returns a slot index of the
    device path, and `collect` returns its host lists.

    Two lanes of the device path: float32 scalars (almost every tensor; stacked once per batch) and float64 vectors (float64 and
    64-bit integer tensors, whose Max/Min need the width)."""

    def __init__(self, low_precision: bool = False, host_kernel: bool = True, checksum: bool = False) -> None:
        self.low_precision = low_precision     # config precision "low": see _scalars
        # host_kernel False: every tensor takes torch's kernels, as on an accelerator (the tests compare both)
        self._host_kinds = {} if not host_kernel else _HOST_KINDS_LOW if low_precision else _HOST_KINDS
        # md5: the checksum is added to the item after fill() and before the counts, as torch's path orders them
        self._scalars_here = not checksum
        # The whole item of a small plain CPU tensor in one C call (checksum: with its "md5"); None without the
        # host kernel. It also keeps the step's health figures of every item the host kernel completes.
        self._host_items = (HostItems(torch.Tensor, torch.nn.Parameter, _STRIDED, self._host_kinds,
                                      {dt: str(dt) for dt in self._host_kinds}, _HOST_CACHE_MIN, checksum)
                            if self._host_kinds else None)
        # (with _cgrad: an ItemReader, which also copies the item of a small tensor met again unmodified)
        self._reader = (_ItemReader(self._host_items) if self._host_items is not None and _ItemReader is not None
                        else None)
        self.host_item = (None if self._host_items is None else
                          self._reader if self._reader is not None else self._host_items.item)
        self.reset()

    def host_health(self) -> Tuple[int, float, bool]:
        """(items with a NaN/Inf Max or Min, the largest finite |Max|/|Min|, whether any statistic is NaN/Inf)
        over the items completed at once this step: by the host kernel, and by `fill_row`."""
        nonfinite, max_abs, values = self._row_health
        c = self._host_items
        if c is None:
            return nonfinite, max_abs, values
        return c.nonfinite + nonfinite, max(c.max_abs, max_abs), bool(c.nonfinite_values) or values

    def fill_row(self, item: dict, row: list) -> None:
        """Fill `item` from a row computed elsewhere (odd_tensors.stats_row, in ROW_KEYS' order) and count it in the
        step's health."""
        item.update(zip(ROW_KEYS, row))
        mx, mn, mean, norm = row[:4]
        nonfinite, max_abs, values = self._row_health
        if math.isfinite(mx) and math.isfinite(mn):
            max_abs = max(max_abs, abs(float(mx)), abs(float(mn)))
        else:
            nonfinite += 1
        self._row_health = (nonfinite, max_abs, values or not all(math.isfinite(x) for x in (mx, mn, mean, norm)))

    def __len__(self) -> int:
        return self._count

    def fill(self, item: dict, t: torch.Tensor) -> bool:
        """Fill `item`'s statistics now when the host kernel reads `t` (a CPU tensor of a supported dtype);
        False otherwise, and `add` takes it. The step's health figures for these items accumulate here."""
        kind = self._host_kinds.get(t.dtype)
        if kind is None or not t.is_cpu or type(t) not in _PLAIN or t.layout is not _STRIDED:
            return False
        if t.is_neg():   # a negated view (torch._neg_view): its memory holds the values before the negation
            return False
        if not t.dim():
            return self._fill_scalar(item, t)
        n = t.numel()
        if not n:
            return False
        # (a Parameter may be written without a version bump, through .data: not remembered. A buffer that
        # batch_norm's CPU kernel updates, also without one, is forgotten after the call: api_mode)
        cached = n >= _HOST_CACHE_MIN and type(t) is not _Parameter
        if cached:
            key = id(t)
            try:
                version = t._version
            except RuntimeError:   # an inference tensor (torch.inference_mode) has no version counter: no cache
                version = None
                cached = False
            hit = self._host_cache.get(key) if cached else None
            if hit is not None and hit[1] == version and hit[0]() is t:
                src = hit[2]
                for k in _ITEM_KEYS:
                    item[k] = src[k]
                self._host_items.note(hit[3])
                return True
        try:
            if t.is_contiguous():
                address = t.data_ptr()
                health = _summarise_into(item, address, n, kind) if address else None
            else:
                # a float view is read where it lies (_cstats' summarise_strided); another, or a layout the pass
                # does not take, is copied first: one copy costs less than torch's kernels
                address = t.data_ptr()
                health = (_summarise_into(item, address, n, kind, t.shape, t.stride())
                          if address and kind <= _FLOAT_KINDS_MAX else None)
                if health is None and address:
                    c = t.detach().contiguous()
                    health = _summarise_into(item, c.data_ptr(), n, kind)
        except RuntimeError:     # a wrapper without storage (functorch): torch's kernels
            return False
        if health is None:
            return False
        self._host_items.note(health)
        if cached:
            try:
                self._host_cache[key] = (weakref.ref(t), version, item, health)
            except TypeError:
                pass
        return True

    def _fill_scalar(self, item: dict, t: torch.Tensor) -> bool:
        """A 0-dim float32 CPU tensor (a loss, say): the reference writes its value as all four statistics, Norm
        included. A finite non-zero value is filled here, as torch's path would fill it (Mean = value / 1, no zero,
        NaN or Inf); zero (whose sign torch's path keeps) and NaN/Inf take torch's path. Without this, the step's
        one or two losses cost the whole batched path at step end (about 0.5 ms a step on the small model)."""
        if t.dtype is not _F32 or not self._scalars_here:
            return False
        try:
            v = t.item()
        except RuntimeError:   # a functorch wrapper (a per-sample loss inside vmap): its plain tensor is summarised
            return False
        if v == 0.0 or v - v != 0:
            return False
        item["Max"] = item["Min"] = item["Mean"] = item["Norm"] = v
        item["zero_count"] = item["nan_count"] = item["inf_count"] = 0
        self._host_items.note(abs(v))
        return True

    def add(self, t: torch.Tensor) -> int:
        key = id(t)
        try:
            version = t._version
        except RuntimeError:   # an inference tensor (torch.inference_mode) has no version counter: no cache
            version = None
        cacheable = version is not None and type(t) is not _Parameter   # (see fill)
        hit = self._cache.get(key) if cacheable else None
        if hit is not None and hit[1] == version and hit[0]() is t:
            return hit[2]
        grad = _grad_enabled()
        if grad:  # two C calls instead of a no_grad context manager per tensor
            _set_grad(False)
        try:
            if t.dtype is _F32 and t.dim():   # the common case inline: aminmax, sum, vector_norm
                mn, mx = _aminmax(t)
                if t.is_contiguous() and t.numel() >= _DOT_MIN:
                    # a large tensor: sqrt(x.x) by the BLAS dot is a third cheaper than vector_norm's reduction,
                    # as accurate, and overflows exactly where vector_norm does
                    v = t.view(-1)
                    norm = _dot(v, v).sqrt_()
                else:
                    norm = _vector_norm(t)
                self._pending32 += (mx, mn, t.sum(), norm)
                lane = 0
            else:
                parts = _scalars(t, self.low_precision)
                # float32 and half scalars share the float32 lane (half converts exactly when stacked)
                lane = 0 if parts[0].dtype in _LANE32 and parts[2].dtype in _LANE32 else 1
                if lane == 0:
                    self._pending32 += parts
                else:
                    # the float32 division here, as torch's float32 mean does it (rare lane: float64, 64-bit ints)
                    parts[2] = parts[2] / t.numel()
                    self._pending64.append(torch.stack([p.to(torch.float64) for p in parts]))
                    if parts[0].dtype is torch.int64:
                        # Max/Min exact past 2**53 (a float64 has 53 bits): kept as integers beside the row
                        self._exact.append((self._n64, torch.stack(parts[:2])))
        finally:
            if grad:
                _set_grad(True)
        if lane == 0:
            # (precision "low" gives a half tensor's Mean itself: see _scalars)
            self._numel32.append(1 if self.low_precision and t.dtype in _HALF and t.dim() else t.numel())
            index = self._n32
            self._n32 += 1
        else:
            index = self._n64
            self._n64 += 1
        slot = self._count
        self._count += 1
        self._where.append((lane, index))
        try:
            ref = weakref.ref(t)
        except TypeError:
            ref = None
        if ref is not None and cacheable:
            self._cache[key] = (ref, version, slot)
        self._refs.append((ref, version, t.numel() == 1))
        if self._n32 - self._merged32 >= _BATCH:
            self._merge()
        return slot

    def forget(self, t: torch.Tensor) -> None:
        """`t` was changed without a version bump (a collective writes through C++): summarise it anew, and the
        views of the same base (a parameter's main_grad in a flat gradient buffer that a bucket's all_reduce
        reduced)."""
        self._cache.pop(id(t), None)
        self._host_cache.pop(id(t), None)
        if issubclass(type(t), torch.Tensor):   # (by the real type: isinstance() may run a __class__ property)
            root = t._base if t._base is not None else t
            for cache in (self._cache, self._host_cache):
                stale = [key for key, entry in cache.items() if _shares_root(entry[0](), root)]
                for key in stale:
                    del cache[key]
        if self._reader is not None:
            self._reader.forget(t)

    def _merge(self) -> None:
        with torch.no_grad():   # a 0-dim tensor's scalars are the tensor itself, which may require grad
            self._merge_pending()

    def _merge_pending(self) -> None:
        if self._pending32:
            rows = torch.stack(self._pending32).float().view(-1, 4)   # .float(): no-op unless all were half
            rows[:, 2].div_(torch.tensor(self._numel32, dtype=torch.float32, device=rows.device))  # Sum -> Mean
            self._batches32.append(rows)
            self._pending32 = []
            self._numel32 = []
            self._merged32 = self._n32
        if self._pending64:
            self._batches64.append(torch.stack(self._pending64))
            self._pending64 = []

    @staticmethod
    def _host(batches: List[torch.Tensor]) -> List[List[float]]:
        if not batches:
            return []
        joined = batches[0] if len(batches) == 1 else torch.cat(batches)
        return joined.cpu().tolist()

    def collect(self) -> List[Optional[List[float]]]:
        """All slots as [Max, Min, Mean, Norm, zero_count, nan_count, inf_count] host lists (one transfer per lane,
        one more per device for the counts)."""
        self._merge()
        lanes = (self._host(self._batches32), self._host(self._batches64))
        if self._exact:
            exact = torch.stack([pair for _, pair in self._exact]).cpu().tolist()
            for (index, _), (mx, mn) in zip(self._exact, exact):
                lanes[1][index][0:2] = mx, mn
        rows = [lanes[lane][index] for lane, index in self._where]
        with torch.no_grad():
            counts = self._counts(rows)
        self.reset()
        return [row + c for row, c in zip(rows, counts)]

    def _counts(self, rows: List[List[float]]) -> List[List[Optional[int]]]:
        """[zero_count, nan_count, inf_count] per slot, counted from the live tensor when it is still alive and
        unchanged.

        NaN/Inf counts are exactly 0 when Max and Min are finite; otherwise, and for the zero count, the tensor is
        needed: a tensor freed or changed before the step ended gets null (unknown). This keeps per-tensor work in
        the hot path at three kernels. The counting kernels' results stay on the device and are read back together
        (one transfer per device, never one host sync per tensor)."""
        out: List[List[Optional[int]]] = []
        pending: Dict[Any, List[torch.Tensor]] = {}     # device -> 0-dim count tensors
        fill: List[Tuple[List[Optional[int]], int, Any, int, int]] = []  # (row, numel, device, first, n)
        for slot, row in enumerate(rows):
            finite = math.isfinite(row[0]) and math.isfinite(row[1])
            if finite and (row[1] > 0 or row[0] < 0):
                out.append([0, 0, 0])   # 0 lies outside [Min, Max]: no zero, no kernel (count_nonzero is slow)
                continue
            ref, version, single = self._refs[slot]
            if single:
                # one value: its counts are its statistics' (a 0-dim tensor changed in place since, too)
                v = row[0]
                out.append([int(v == 0), int(v != v), int(math.isinf(v))])
                continue
            t = ref() if ref is not None else None
            if t is None or version is None or t._version != version or t.is_meta:
                out.append([None, 0, 0] if finite else [None, None, None])
                continue
            if t.is_complex():
                t = t.abs()
            res: List[Optional[int]] = [None, 0, 0]
            out.append(res)
            dev = pending.setdefault(t.device, [])
            fill.append((res, t.numel(), t.device, len(dev), 1 if finite else 3))
            dev.append(torch.count_nonzero(t))
            if not finite:
                dev.append(torch.isnan(t).sum())
                dev.append(torch.isinf(t).sum())
        host = {d: torch.stack(ts).cpu().tolist() for d, ts in pending.items()}
        for res, numel, dev, first, n in fill:
            vals = host[dev]
            res[0] = numel - int(vals[first])
            if n == 3:
                res[1] = int(vals[first + 1])
                res[2] = int(vals[first + 2])
        return out

    def reset(self) -> None:
        self._pending32: List[torch.Tensor] = []
        self._numel32: List[int] = []      # numel of each pending float32 row (its Sum becomes the Mean)
        self._pending64: List[torch.Tensor] = []
        self._exact: List[Tuple[int, torch.Tensor]] = []   # (row in lane 1, [Max, Min] as int64) of int64 tensors
        self._host_cache: Dict[int, Tuple[Any, int, dict, float]] = {}  # id -> (weakref, version, item, health)
        if self._reader is not None:
            self._reader.clear()
        # the step's health of the items filled at once (host_health) starts again
        if self._host_items is not None:
            self._host_items.reset()
        self._row_health: Tuple[int, float, bool] = (0, 0.0, False)   # fill_row's share
        self._batches32: List[torch.Tensor] = []
        self._batches64: List[torch.Tensor] = []
        self._n32 = 0
        self._merged32 = 0                   # rows of lane 0 already stacked into a batch
        self._n64 = 0
        self._count = 0
        self._where: List[Tuple[int, int]] = []              # slot -> (lane, row in lane)
        self._cache: Dict[int, Tuple[Any, int, int]] = {}   # id(tensor) -> (weakref, version, slot)
        self._refs: List[Tuple[Any, int, bool]] = []         # slot -> (weakref or None, version, one value)


def _raw_bytes(t: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        # (a conjugate or negated view's memory holds the values before the conjugation or negation)
        c = t.detach().resolve_conj().resolve_neg().contiguous().cpu().reshape(-1)
        return c.view(torch.uint8).numpy()


def tensor_checksum(t: torch.Tensor) -> str:
    """CRC-32 of the raw bytes, written "%08x" (what the reference calls md5)."""
    if (t.is_cpu and type(t) in _PLAIN and t.layout is _STRIDED and t.is_contiguous() and not t.is_conj()
            and not t.is_neg()):
        # the common case without copies: the C CRC-32 (carry-less multiplication, zlib.crc32's result at
        # several times its speed) reads the tensor's own memory, the GIL released
        n = t.numel() * t.element_size()
        try:
            address = t.data_ptr() if n else 0
        except RuntimeError:     # a wrapper without storage
            address = 0
        if address:
            return "%08x" % _crc32_at(address, n)
    return "%08x" % (zlib.crc32(_raw_bytes(t)) & 0xFFFFFFFF)


def tensor_xor(t: torch.Tensor) -> str:
    """64-bit XOR fold of the raw bytes (zero padded to 8 bytes, little endian), written "0x%016x"."""
    b = _raw_bytes(t)
    pad = (-b.size) % 8
    if pad:
        b = np.concatenate([b, np.zeros(pad, dtype=np.uint8)])
    words = b.view("<u8")
    return "0x%016x" % int(np.bitwise_xor.reduce(words)) if words.size else "0x%016x" % 0


def _shares_root(o: Optional[torch.Tensor], root: torch.Tensor) -> bool:
    """Whether `o` (a remembered tensor, None once freed) is `root` or a view of it."""
    return o is not None and (o is root or o._base is root)
