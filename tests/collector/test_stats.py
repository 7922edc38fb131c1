"""Statistics semantics of REFERENCE.md s1, checked against torch computed independently (float64)."""
import math
import zlib

import numpy as np
import pytest
import torch

from tbprobe.collector import _cstats
from tbprobe.collector.pytorch.stats import StatBuffer, tensor_checksum, tensor_xor
from tbprobe.collector.pytorch.values import ItemMaker
from tbprobe.collector.recorder import StepRecord, fill_items


def summarise(values, summary_mode="statistics", task="statistics"):
    """Items as the session makes them: the host kernel fills what it reads, the device path the rest."""
    buf = StatBuffer()
    rec = StepRecord(0)
    filled = []

    def on_stats(item, t):
        rec.slots.append((item, buf.add(t), t.numel()))

    def fill(item, t):
        done = buf.fill(item, t)
        filled.append(done)
        return done

    maker = ItemMaker(task, summary_mode, on_stats, None, fill=fill)
    items = [maker.value(v, f"x.{i}") for i, v in enumerate(values)]
    count = len(buf) + sum(filled)
    fill_items(rec, buf.collect())
    return items, count, rec


@pytest.mark.parametrize("seed", [0, 7])
def test_float32_matches_independent_computation(seed):
    torch.manual_seed(seed)
    t = torch.randn(5, 7)
    (item,), _, _ = summarise([t])
    d = t.double()
    assert item["Max"] == t.max().item() and item["Min"] == t.min().item()
    # float32 rounding is relative to the values summed, not to their mean: seed 7's mean, -1.8e-4, is off by
    # 2.6e-5 relative to itself but by only 4.7e-9 in absolute terms
    assert math.isclose(item["Mean"], d.mean().item(), rel_tol=1e-5, abs_tol=1e-6 * d.abs().mean().item())
    assert math.isclose(item["Norm"], d.norm().item(), rel_tol=1e-5)
    assert item["nan_count"] == 0 and item["inf_count"] == 0 and item["zero_count"] == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_max_min_in_own_dtype_mean_norm_in_float32(dtype):
    t = (torch.randn(64) * 3).to(dtype)
    (item,), _, _ = summarise([t])
    assert item["dtype"] == str(dtype)
    assert item["Max"] == t.max().item() and item["Min"] == t.min().item()
    d = t.double()
    # accumulated at least as finely as float32, and written as float32 values
    assert math.isclose(item["Mean"], d.mean().item(), rel_tol=1e-6, abs_tol=1e-7)
    assert math.isclose(item["Norm"], d.norm().item(), rel_tol=1e-6)
    assert all(float(np.float32(item[k])) == item[k] for k in ("Mean", "Norm"))


def test_integers_bool_zero_dim_complex():
    i = torch.tensor([[1, -5], [7, 0]])
    b = torch.tensor([True, False, True])
    z = torch.tensor(-2.5)
    c = torch.tensor([3 + 4j, 0 + 1j])
    (ii, bb, zz, cc), _, _ = summarise([i, b, z, c])
    assert ii["Max"] == 7 and ii["Min"] == -5 and isinstance(ii["Max"], int)
    assert ii["Mean"] == 0.75 and math.isclose(ii["Norm"], math.sqrt(75), rel_tol=1e-6) and ii["zero_count"] == 1
    assert bb["Max"] is True and bb["Min"] is False
    assert zz["Max"] == zz["Min"] == zz["Mean"] == zz["Norm"] == -2.5 and zz["shape"] == []
    assert cc["Max"] == 5.0 and cc["Min"] == 1.0 and cc["dtype"] == "torch.complex64"


def test_empty_and_meta_are_null_and_nonfinite_counted():
    e = torch.empty(0, 3)
    m = torch.empty(4, device="meta")
    bad = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0])
    (ee, mm, xx), n, _ = summarise([e, m, bad])
    assert n == 1
    for item in (ee, mm):
        assert item["Max"] is None and item["Norm"] is None and "nan_count" not in item
    assert ee["shape"] == [0, 3] and mm["shape"] == [4]
    assert math.isnan(xx["Max"]) and xx["nan_count"] == 1 and xx["inf_count"] == 2 and xx["zero_count"] == 1


def test_a_negated_view_is_summarised_by_its_values_not_its_memory():
    neg = torch._neg_view(torch.tensor([1.0, 2.0, 4.0]))          # reads -1, -2, -4; memory holds 1, 2, 4
    (item,), _, _ = summarise([neg])
    assert (item["Max"], item["Min"], item["Mean"]) == (-1.0, -4.0, pytest.approx(-7 / 3))


def test_views_noncontiguous_and_nested_values():
    base = torch.arange(12.0).reshape(3, 4)
    v = base.t()[1:]
    items, _, _ = summarise([[v, (None, 3)], {"k": 2.5, "s": slice(1, None)}, torch.Size([2, 3]), torch.float16,
                             Ellipsis, "text", True])
    (vi, (none, three)), kw, size, dt, ell, text, flag = items
    assert vi["shape"] == [3, 3] and vi["Max"] == 11.0 and vi["Min"] == 1.0
    assert none is None and three == {"type": "int", "value": 3}
    assert kw == {"k": {"type": "float", "value": 2.5}, "s": {"type": "slice", "value": [1, None, None]}}
    assert size == {"type": "torch.Size", "value": [2, 3]} and dt == {"type": "torch.dtype", "value": "torch.float16"}
    assert ell["type"] == "ellipsis" and text == {"type": "str", "value": "text"}
    assert flag == {"type": "bool", "value": True}


def _made(t):
    """`t` as autograd makes tensors (a Parameter is never remembered: it may be written without a version bump,
    through .data)."""
    return t.requires_grad_() * 1


def test_a_tensor_seen_twice_unmodified_is_summarised_once():
    t = _made(torch.randn(10))
    buf = StatBuffer()
    assert buf.add(t) == buf.add(t)
    with torch.no_grad():
        t.mul_(2)                   # changed in place: new statistics
    assert buf.add(t) == 1
    other = torch.randn(10)
    assert buf.add(other) == 2
    param = torch.nn.Parameter(torch.randn(10))
    assert buf.add(param) == 3 and buf.add(param) == 4
    rows = buf.collect()
    assert len(rows) == 5 and rows[1][0] == pytest.approx(rows[0][0] * 2)


def test_checksum_is_crc32_and_xor_is_a_64bit_fold():
    t = torch.tensor([1.0, 2.0, 3.0])
    raw = np.array([1.0, 2.0, 3.0], dtype=np.float32).tobytes()
    assert tensor_checksum(t) == "%08x" % zlib.crc32(raw)
    padded = raw + b"\0" * 4
    words = np.frombuffer(padded, dtype="<u8")
    assert tensor_xor(t) == "0x%016x" % (int(words[0]) ^ int(words[1]))
    assert tensor_checksum(t.t()) == tensor_checksum(t)            # bytes in logical order
    assert tensor_checksum(torch.tensor([1.0], dtype=torch.bfloat16)) == "%08x" % zlib.crc32(b"\x80\x3f")


def test_summary_modes_and_structure_items():
    t = torch.randn(4)
    (md5,), _, _ = summarise([t], "md5")
    assert md5["md5"] == tensor_checksum(t) and md5["Max"] == t.max().item()
    (xor,), n, _ = summarise([t], "xor")
    assert list(xor) == ["type", "dtype", "shape", "md5", "requires_grad"] and n == 0
    (st,), n, _ = summarise([t], task="structure")
    assert list(st) == ["type", "dtype", "shape", "requires_grad"] and n == 0


def test_statistics_never_touch_autograd():
    x = torch.randn(6, requires_grad=True)
    y = x * 2
    version = y._version
    summarise([x, y])
    assert y._version == version and y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((6,), 2.0))


def test_precision_low_keeps_half_tensors_in_their_own_dtype():
    t = (torch.randn(300) * 50).to(torch.float16)
    high = StatBuffer()
    low = StatBuffer(low_precision=True)
    (h,) = (high.add(t), high.collect())[1]
    (lo,) = (low.add(t), low.collect())[1]
    assert h[:2] == lo[:2] == [t.max().item(), t.min().item()]                  # exact either way
    assert math.isclose(h[3], t.double().norm().item(), rel_tol=1e-6)
    assert lo[3] == torch.linalg.vector_norm(t).item()                            # rounded to float16
    assert lo[3] == float(torch.tensor(h[3]).to(torch.float16)) or math.isclose(lo[3], h[3], rel_tol=1e-3)
    assert lo[2] == t.mean().item() and math.isclose(lo[2], h[2], rel_tol=1e-2, abs_tol=1e-2)   # the dtype's mean


def test_large_float32_norm_by_dot_matches_float64():
    t = torch.randn(64, 512)              # large and contiguous: the dot path
    row = (lambda b: (b.add(t), b.collect())[1][0])(StatBuffer())
    assert math.isclose(row[3], t.double().norm().item(), rel_tol=1e-6)
    assert math.isclose(row[2], t.double().mean().item(), rel_tol=1e-4, abs_tol=1e-7)
    big = torch.full((1 << 15,), 1e20)
    row = (lambda b: (b.add(big), b.collect())[1][0])(StatBuffer())
    assert math.isinf(row[3]) and row[3] == torch.linalg.vector_norm(big).item()   # overflows as torch does


def test_zero_count_known_without_the_tensor_when_zero_is_out_of_range():
    pos = torch.rand(50) + 0.5
    neg = -pos
    mixed = torch.tensor([0.0, 1.0, -2.0, 0.0])
    buf = StatBuffer()
    slots = [buf.add(t) for t in (pos, neg, mixed)]
    del pos, neg                   # freed before the step ends: the count is still exact
    rows = buf.collect()
    assert [rows[s][4:] for s in slots] == [[0, 0, 0], [0, 0, 0], [2, 0, 0]]


_KEYS = ("Max", "Min", "Mean", "Norm", "zero_count", "nan_count", "inf_count")


def _row(t, low=False, host=True):
    """[Max, Min, Mean, Norm, zero, nan, inf] by the host kernel when it takes `t`, else by the device path."""
    buf = StatBuffer(low_precision=low, host_kernel=host)
    item = {}
    if buf.fill(item, t):
        return [item[k] for k in _KEYS]
    buf.add(t)
    return buf.collect()[0]


@pytest.fixture(params=["portable", "avx2", "avx512"])
def block(request):
    """Each of the host kernel's blocks in turn (_cstats picks the widest the CPU runs at import)."""
    if not _cstats._use_block(request.param):
        pytest.skip(f"this CPU (or build) has no {request.param} block")
    yield request.param
    _cstats._use_block("best")


def test_the_widest_block_is_in_use_and_names_are_checked():
    best = _cstats._block()
    assert best in ("portable", "avx2", "avx512")
    assert _cstats._use_block("avx1024") is False and _cstats._block() == best
    assert _cstats._use_block("portable") and _cstats._block() == "portable"
    assert _cstats._use_block("best") and _cstats._block() == best


def test_a_tensor_of_a_few_values_gets_the_same_bits_from_every_block():
    """Below one vector the values are summed in double whichever block runs (msprobe's dump of a loss or a scale
    is then matched to the bit, as test_peers' debug-level test checks)."""
    rows = {}
    try:
        for name in ("portable", "avx2", "avx512"):
            if _cstats._use_block(name):
                rows[name] = [str(_row(_special(n, torch.float32, n) * 1.37)) for n in range(1, 8)]
    finally:
        _cstats._use_block("best")
    assert len(set(map(tuple, rows.values()))) == 1, rows


def _special(n, dtype, seed):
    """n values of `dtype` with zeros, -0.0, NaN and +-Inf scattered over the vector body and the tail."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g) * 3
    for i in torch.randint(0, n, (max(1, n // 50),), generator=g).tolist():
        t[i] = 0.0
    if n > 3:
        t[n - 1] = -0.0
    return t.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [14, 63, 64, 65, 511, 512, 513, 2047, 2048, 4096, 4099, 8191, 70000])
def test_host_kernel_agrees_with_torch_kernels(dtype, n, block):
    """A CPU tensor takes the one-pass host kernel (a non-contiguous view through a copy); without it, torch's
    kernels and the counts at the step's end, as on an accelerator. All must say the same."""
    rows = max(2, n // 7)
    t = _special(rows * 7, dtype, n).reshape(rows, 7)
    assert not t.t().is_contiguous()
    host, kernels, copied = _row(t), _row(t.t(), host=False), _row(t.t())
    assert copied[:2] == host[:2] and copied[4:] == host[4:]
    assert host[0] == kernels[0] == t.max().item() and host[1] == kernels[1] == t.min().item()
    d = t.double()
    for got in (host, kernels, copied):
        assert math.isclose(got[2], d.mean().item(), rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(got[3], d.norm().item(), rel_tol=1e-5)
    assert host[4:] == kernels[4:] == [int((t == 0).sum()), 0, 0]


@pytest.mark.parametrize("n", [3, 9, 16, 100, 1000, 100000])
def test_the_norm_of_values_whose_squares_underflow_does_not_depend_on_the_length(n, block):
    """The last values of a block (past its full vectors) were squared in double, the others in float32, where
    a square below 1.2e-38 is 0: an all-tiny tensor (a vanishing gradient, |x| = 3e-30) got a Norm from its
    length modulo the lanes (0 for 16 values, 6e-30 for 100). A square float32 rounds to 0 is 0 in the tail too
    now, as in the lanes and in torch's norm (0, as torch and the reference say)."""
    t = torch.full((n,), 3e-30)
    host, kernels = _row(t), _row(t, host=False)
    assert host[3] == kernels[3] == t.norm().item() == 0.0
    assert host[0] == pytest.approx(3e-30) and host[4] == 0   # (Max, and no zeros: the values are there)


def _views(dtype):
    """Views that are not contiguous, each with a name: transposed, permuted, sliced with a step, expanded (a
    zero stride), a column, over sizes that cross the blocks' edges, and NaN/Inf inside one."""
    base = _special(6 * 64 * 70, torch.float32, 5).to(dtype)
    q = base.reshape(6, 64, 70)
    special = _special(9000, torch.float32, 9).to(dtype).reshape(90, 100)
    special[17, 3], special[80, 99] = float("nan"), float("inf")
    return {"transposed": q.transpose(1, 2), "permuted": q.permute(2, 0, 1), "stepped": q[:, ::3, 1:67],
            "expanded": base[:70].reshape(1, 70).expand(130, 70), "column": q[:, :, 5], "qkv": q.reshape(6, 64, 2, 35)
            .transpose(1, 2), "one row": q[2:3, 7:8, ::2].transpose(0, 2), "special": special.t()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_float_view_is_read_in_place_with_its_copys_every_bit(dtype, block):
    for name, v in _views(dtype).items():
        assert not v.is_contiguous(), name
        buf = StatBuffer()
        in_place, copied = {}, {}
        assert buf.fill(in_place, v) and buf.fill(copied, v.contiguous()), name
        a, b = [in_place[k] for k in _KEYS], [copied[k] for k in _KEYS]
        assert str(a) == str(b), name    # (str: NaN == NaN)
        direct = {}   # the pass took the view itself (None would mean the copy did)
        kind = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[dtype]
        assert _cstats.summarise_into(direct, v.data_ptr(), v.numel(), kind, v.shape, v.stride()) is not None
        assert str([direct[k] for k in _KEYS]) == str(b), name


def test_a_layout_the_pass_does_not_take_is_copied_and_bad_layouts_are_refused():
    v = torch.randn([2] * 17).permute(*range(16, -1, -1))    # 17 dimensions that do not merge
    item = {}
    assert _cstats.summarise_into(item, v.data_ptr(), v.numel(), 0, v.shape, v.stride()) is None and item == {}
    assert _row(v)[:2] == [v.max().item(), v.min().item()]  # (through a copy)
    w = torch.randn(4, 5).t()
    with pytest.raises(ValueError, match="multiply"):
        _cstats.summarise_into({}, w.data_ptr(), 21, 0, w.shape, w.stride())
    with pytest.raises(ValueError, match="float kind"):
        _cstats.summarise_into({}, w.data_ptr(), 20, 3, w.shape, w.stride())
    with pytest.raises(TypeError, match="tuples"):
        _cstats.summarise_into({}, w.data_ptr(), 20, 0, [5, 4], w.stride())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
# the first value, inside a vector, the blocks' edges, the tail
@pytest.mark.parametrize("where", [0, 5, 8, 17, 600, 1029, 2047, 2048, 4095, 4096, 8257])
def test_host_kernel_nonfinite_values(dtype, where, block):
    t = _special(8260, dtype, where)
    t[where] = float("nan")
    row = _row(t)
    assert all(math.isnan(v) for v in row[:4]) and row[5] == 1 and row[6] == 0
    t[where] = float("inf")
    t[(where + 3) % 8260] = -float("inf")
    row = _row(t)
    assert row[0] == math.inf and row[1] == -math.inf and math.isnan(row[2]) and row[3] == math.inf
    assert row[4:] == [int((t == 0).sum()), 0, 2]
    assert row[:2] == _row(t.reshape(20, 413).t())[:2]


def test_host_kernel_all_special_and_overflow(block):
    assert _row(torch.full((100,), float("nan")))[4:] == [0, 100, 0]
    assert _row(torch.zeros(100))[:5] == [0.0, 0.0, 0.0, 0.0, 100]
    assert _row(torch.tensor([-0.0, 0.0]))[4] == 2
    big = torch.full((1000,), 2e19)       # finite values whose float32 sum of squares overflows, as torch's does
    row = _row(big)
    assert row[3] == math.inf == torch.linalg.vector_norm(big).item() and row[2] == pytest.approx(2e19, rel=1e-6)


def test_host_kernel_is_not_used_where_it_would_change_the_answer():
    half = (torch.randn(300) * 50).to(torch.float16)
    low = _row(half, low=True)
    assert low[3] == torch.linalg.vector_norm(half).item()                     # precision low: the half dtype
    f64 = torch.randn(100, dtype=torch.float64)
    assert _row(f64)[0] == f64.max().item()                                    # float64 keeps its width
    zero_dim = torch.tensor(-2.5)
    assert _row(zero_dim)[:4] == [-2.5] * 4                                     # the value itself, as the reference


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_host_kernel_integers_and_bool(dtype):
    g = torch.Generator().manual_seed(3)
    t = torch.randint(-1000, 1000, (37, 11), generator=g).to(dtype)
    t[3, 4] = 0
    host, kernels = _row(t), _row(t, host=False)
    assert host[:2] == kernels[:2] == [t.max().item(), t.min().item()]
    assert isinstance(host[0], int)
    d = t.double()
    for got in (host, kernels):
        assert math.isclose(got[2], d.mean().item(), rel_tol=1e-6, abs_tol=1e-7)
        assert math.isclose(got[3], d.norm().item(), rel_tol=1e-6)
    assert host[4:] == kernels[4:] == [int((t == 0).sum()), 0, 0]
    big = torch.tensor([2 ** 62, -(2 ** 62) - 3], dtype=torch.int64)   # exact beyond float64's 53 bits
    assert _row(big)[:2] == [2 ** 62, -(2 ** 62) - 3]


def _filled(t, buf=None):
    buf = StatBuffer() if buf is None else buf
    item = {"Max": None, "Min": None, "Mean": None, "Norm": None}
    assert buf.fill(item, t)
    return item, buf


def test_fill_sets_the_items_statistics_at_once_and_the_steps_health():
    t = torch.tensor([[1.5, -4.0, 0.0], [2.0, 0.0, 3.0]])
    item, buf = _filled(t)
    assert list(item) == ["Max", "Min", "Mean", "Norm", "zero_count", "nan_count", "inf_count"]
    assert item["Max"] == 3.0 and item["Min"] == -4.0 and item["zero_count"] == 2
    assert math.isclose(item["Mean"], t.double().mean().item(), rel_tol=1e-6)
    assert buf.host_health() == (0, 4.0, False)   # (items with NaN/Inf Max or Min, largest |x|, any NaN/Inf)
    _filled(torch.tensor([1.0, float("inf")]), buf)
    assert buf.host_health()[0] == 1 and buf.host_health()[2]
    over, buf2 = _filled(torch.full((8,), 3e38))          # finite Max/Min, a Norm that overflows
    assert over["Norm"] == math.inf and buf2.host_health()[0] == 0 and buf2.host_health()[2]
    flags, _ = _filled(torch.tensor([True, False, True]))
    assert flags["Max"] is True and flags["Min"] is False
    ints, _ = _filled(torch.tensor([3, -9], dtype=torch.int32))
    assert ints["Max"] == 3 and isinstance(ints["Max"], int)


def test_fill_leaves_what_the_host_kernel_cannot_read_to_add():
    buf = StatBuffer()
    assert buf.fill({}, torch.tensor(2.0))                           # 0-dim float32, finite, not zero: here
    assert not buf.fill({}, torch.tensor(-0.0))                      # 0-dim zero (its sign), NaN, Inf: via add
    assert not buf.fill({}, torch.tensor(float("nan")))
    assert not buf.fill({}, torch.tensor(2.0, dtype=torch.float64))  # other 0-dim dtypes: via add
    assert not StatBuffer(checksum=True).fill({}, torch.tensor(2.0))  # md5 orders the keys as add's path does
    assert not buf.fill({}, torch.randn(4, dtype=torch.float64))     # float64 keeps its width, via add
    assert not buf.fill({}, torch.empty(3, device="meta"))
    assert not buf.fill({}, torch._neg_view(torch.ones(3)))          # its memory holds 1s: via add
    assert not StatBuffer(host_kernel=False).fill({}, torch.randn(4))


@pytest.mark.parametrize("value", [2.5, -1.25, 3e38, -3e38, 1e-40, 0.0, -0.0, float("nan"), float("inf"),
                                   float("-inf")])
def test_a_0_dim_tensor_filled_at_once_matches_the_batched_path(value):
    """The reference writes a 0-dim tensor's value as all four statistics (a negative Norm included)."""
    for t in (torch.tensor(value), torch.tensor(value, requires_grad=True)):
        fast, slow = _row(t), _row(t, host=False)
        assert repr(fast) == repr(slow), (value, fast, slow)
        assert repr(fast[:4]) == repr([float(torch.tensor(value))] * 4)


def test_fill_reuses_a_large_tensor_seen_twice_unmodified():
    t = _made(torch.randn(1 << 15))
    first, buf = _filled(t)
    again, _ = _filled(t, buf)
    assert again == first and len(buf._host_cache) == 1
    _filled(torch.nn.Parameter(torch.randn(1 << 15)), buf)  # a Parameter: not remembered
    assert len(buf._host_cache) == 1
    with torch.no_grad():
        t.mul_(-2)                                          # changed in place: summarised anew
    changed, _ = _filled(t, buf)
    assert changed["Max"] == pytest.approx(-2 * first["Min"]) and changed["Min"] == pytest.approx(-2 * first["Max"])


def _item_makers(summary_mode, reader="cpp"):
    """The same ItemMaker twice: with a whole-item C path and without it. `reader` "cpp" is StatBuffer.host_item
    (the tensor's facts read in C++, tbprobe/collector/_cgrad.cpp), "c" the HostItems.item it stands in for where
    _cgrad is not built (the facts read as Python attributes)."""
    makers = []
    for use_c in (True, False):
        buf = StatBuffer(checksum=summary_mode == "md5")
        if reader == "c":
            buf.host_item = buf._host_items.item
        maker = ItemMaker("statistics", summary_mode, lambda item, t: None, None, fill=buf.fill,
                          host_item=buf.host_item if use_c else None)
        makers.append((maker, buf))
    return makers


class _Sub(torch.Tensor):
    pass


class _Hostile:
    @property
    def __class__(self):
        raise RuntimeError("no class for you")


_CASES = [torch.randn(5, 7), torch.randn(3).half(), torch.randn(4, 4).bfloat16(), torch.arange(-5, 10),
          torch.arange(10, dtype=torch.int32), torch.rand(9) > 0.5, torch.randn(6, 6).t(), torch.tensor(3.0),
          torch.zeros(0, 3), torch.nn.Parameter(torch.randn(3, 3)), torch.randn(3, requires_grad=True),
          torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("-inf")]), torch.full((8,), 3e38),
          torch.randn(3, dtype=torch.float64), torch.randn(1 << 14), torch.randn((1 << 14) - 1), torch.randn(2, 3)[:, 1],
          torch.empty(2, device="meta"), None, 3, 2.5, "s", [torch.ones(2), {"k": torch.zeros(1, 2)}],
          torch._neg_view(torch.tensor([1.0, 2.0])), torch.randn(3).as_subclass(_Sub)]


def test_the_cpp_item_reader_is_built():
    # (setup.py builds it with the C++ hooks; without it the reader tests below would run HostItems.item twice)
    from tbprobe.collector.pytorch import stats
    assert stats._ItemReader is not None, "tbprobe.collector._cgrad is not built"
    assert type(StatBuffer().host_item) is stats._ItemReader


def test_the_reader_copies_the_item_of_a_tensor_met_again_unmodified():
    buf = StatBuffer()
    read = buf.host_item
    t = _made(torch.tensor([1.0, -3.0, 2.0]))
    first, again = read(t), read(t)
    assert again == first and again is not first            # a copy: the records never share a dict
    assert buf.host_health() == (0, 3.0, False)
    with torch.no_grad():
        t.mul_(2)                                            # a version bump: summarised anew
    assert read(t)["Min"] == -6.0
    # an alias is another tensor: summarised itself (same values)
    assert read(t.view_as(t))["Min"] == -6.0
    # a change without a version bump (what a collective's C++ does) is seen only once forgotten
    t.detach().numpy()[1] = -8.0
    assert read(t)["Min"] == -6.0
    buf.forget(t)
    assert read(t)["Min"] == -8.0
    # a tensor that died never lends its item to a new one, wherever the new one's memory lies
    for _ in range(50):
        u = _made(torch.full((3,), 5.0))
        assert read(u)["Max"] == 5.0
        del u
        w = _made(torch.full((3,), 7.0))
        assert read(w)["Max"] == 7.0
        del w
    # what changes without a version bump but is in the item: requires_grad, and the data itself (`t.data = u`)
    leaf = torch.tensor([1.0, 2.0])
    assert read(leaf)["requires_grad"] is False
    leaf.requires_grad_()
    assert read(leaf)["requires_grad"] is True
    with torch.no_grad():
        leaf.data = torch.tensor([4.0, 5.0, 6.0])
    assert read(leaf)["shape"] == [3] and read(leaf)["Max"] == 6.0
    # nothing is remembered past the step's end
    before = read(t)
    buf.reset()
    t.detach().numpy()[1] = -9.0
    assert read(t)["Min"] == -9.0 and before["Min"] == -8.0
    with pytest.raises(TypeError):
        type(read)("not host items")
    # anything but a plain tensor is None, even an object whose isinstance() check raises
    assert read(_Hostile()) is None and read(None) is None and read(t.as_subclass(_Sub)) is None
    buf.forget(_Hostile())


def test_forget_drops_a_large_tensors_remembered_statistics_too():
    buf = StatBuffer()
    t = torch.ones(1 << 15)                 # past _HOST_CACHE_MIN: fill remembers it by object and version
    first, _ = _filled(t, buf)
    t.numpy()[0] = 50.0                     # as a gloo all_reduce writes: no version bump
    buf.forget(t)
    again, _ = _filled(t, buf)
    assert first["Max"] == 1.0 and again["Max"] == 50.0


def test_the_reader_takes_a_large_tensor_and_remembers_it_until_changed_or_forgotten():
    buf = StatBuffer()
    read = buf.host_item
    t = _made(torch.ones(1 << 17))          # large, and past the pass's GIL release (1 << 16)
    first = read(t)
    assert first is not None and first["Max"] == 1.0 and first["Norm"] == pytest.approx(2 ** 8.5)
    t.detach().numpy()[0] = 50.0            # no version bump: the reader cannot tell, and keeps its item
    assert read(t) == first
    buf.forget(t)                           # (what the distributed capture does after a collective)
    assert read(t)["Max"] == 50.0
    param = torch.nn.Parameter(torch.ones(8))
    assert read(param)["Max"] == 1.0
    param.data[0] = 9.0                     # a Parameter is never remembered: written through .data, say
    assert read(param)["Max"] == 9.0
    with torch.no_grad():
        t.mul_(-1)                          # a version bump: summarised anew
    assert read(t)["Min"] == -50.0
    assert read(t.t().contiguous().view(-1)[: 1 << 16]) is not None   # another tensor, of another size
    assert read(torch.ones(4, 1 << 15).t()) is None   # not contiguous: the Python path, which reads it in place


@pytest.mark.parametrize("reader", ["cpp", "c"])
@pytest.mark.parametrize("summary_mode", ["statistics", "md5"])
def test_host_items_are_the_python_paths_items_key_for_key(summary_mode, reader):
    (fast, fast_buf), (slow, slow_buf) = _item_makers(summary_mode, reader)
    taken = 0
    for i, v in enumerate(_CASES):
        a, b = fast.value(v, f"x.{i}"), slow.value(v, f"x.{i}")
        assert repr(a) == repr(b), (v, a, b)          # repr: the same keys in the same order, NaN included
        if isinstance(v, torch.Tensor):
            taken += fast_buf.host_item(v) is not None
    # the plain contiguous CPU tensors of a dtype the pass reads, and nothing else: HostItems alone leaves the one
    # of 1 << 14 elements to the Python path, which remembers large tensors; the C++ reader remembers them itself
    assert taken == (13 if reader == "cpp" else 12)
    # the same health as the Python path's: the NaN and -Inf items (each made twice here), the largest |Max| of
    # the items whose values are finite (3e38, whose Norm overflows, counts: those are the values growing towards
    # an overflow), and "some statistic is not finite"
    big = torch.tensor(3e38).item()
    assert slow_buf.host_health() == (2, big, True)
    assert fast_buf.host_health() == (2 * 2, big, True)
    fast_buf.reset()
    assert fast_buf.host_health() == (0, 0.0, False)


def test_host_items_checksum_is_zlib_crc32_of_the_raw_bytes():
    buf = StatBuffer(checksum=True)
    for t in (torch.randn(1), torch.randn(7).half(), torch.arange(13), torch.rand(1001) > 0.3, torch.randn(4097)):
        assert buf.host_item(t)["md5"] == "%08x" % zlib.crc32(t.numpy().tobytes())
    from tbprobe.collector._cstats import crc32_at
    raw = torch.randint(0, 256, (1 << 16,), dtype=torch.uint8)
    for n in (0, 1, 7, 8, 9, 4095, 1 << 16):
        assert crc32_at(raw.data_ptr(), n) == zlib.crc32(raw.numpy()[:n].tobytes())
    # every length around the 16- and 64-byte folds of the fast path, at every alignment, and random ones
    data = raw.numpy().tobytes()
    gen = torch.Generator().manual_seed(3)
    cases = [(off, n) for off in range(16) for n in range(0, 200)]
    cases += [(int(o), int(n)) for o, n in zip(torch.randint(0, 64, (300,), generator=gen),
                                                torch.randint(0, (1 << 16) - 64, (300,), generator=gen))]
    for off, n in cases:
        assert crc32_at(raw.data_ptr() + off, n) == zlib.crc32(data[off:off + n]), (off, n)
    # tensor_checksum takes the same path for any contiguous CPU tensor, and zlib's for the rest
    for t in (torch.randn(5000), torch.randn(300, 7).double(), torch.randn(64, 64).t(), torch.zeros(0)):
        assert tensor_checksum(t) == "%08x" % zlib.crc32(t.contiguous().numpy().tobytes())


def test_host_items_refuse_bad_construction_and_odd_values():
    from tbprobe.collector._cstats import HostItems
    with pytest.raises(TypeError):
        HostItems(1, 2, torch.strided, {}, {}, 16)
    with pytest.raises(ValueError):
        HostItems(torch.Tensor, torch.nn.Parameter, torch.strided, {torch.float32: 9}, {torch.float32: "f"}, 16)
    with pytest.raises(ValueError):
        HostItems(torch.Tensor, torch.nn.Parameter, torch.strided, {torch.float32: 0}, {}, 16)
    hi = HostItems(torch.Tensor, torch.nn.Parameter, torch.strided, {torch.float32: 0}, {torch.float32: "f32"}, 16)
    for v in (None, object(), torch.randn(16), torch.randn(2, 8), torch.randn(4, dtype=torch.float64)):
        assert hi.item(v) is None                       # past cache_min, or not a kind it reads: the Python path
    assert hi.item(torch.randn(3, 5))["dtype"] == "f32"


@pytest.mark.parametrize("host_kernel", [True, False])
def test_int64_max_and_min_are_exact_past_2_to_the_53(host_kernel):
    # a float64 holds 53 bits: 2**60 + 1 came out as 2**60 on the batched path (every 0-dim int64 on the CPU,
    # every int64 tensor on an accelerator)
    v = 2 ** 60 + 1
    buf = StatBuffer(host_kernel=host_kernel)
    rec = StepRecord(0)
    items = []
    for t in (torch.tensor(v), torch.tensor([v, -v, 3])):
        item = {}
        if not buf.fill(item, t):
            rec.slots.append((item, buf.add(t), t.numel()))
        items.append(item)
    fill_items(rec, buf.collect())
    assert [(i["Max"], i["Min"]) for i in items] == [(v, v), (v, -v)]
    assert all(isinstance(i[k], int) for i in items for k in ("Max", "Min"))


def test_precision_low_keeps_a_half_mean_that_its_sum_would_overflow():
    # 65536 values of 2.0: their half sum overflows (inf), their mean is 2.0, as torch.mean in the dtype gives
    buf = StatBuffer(low_precision=True)
    for dt in (torch.float16, torch.bfloat16):
        buf.add(torch.full((65536,), 2.0, dtype=dt))
        buf.add(torch.tensor([1.0, 2.0, 4.0], dtype=dt))
    rows = buf.collect()
    assert [r[2] for r in rows] == [2.0, pytest.approx(7 / 3, rel=1e-2), 2.0, pytest.approx(7 / 3, rel=1e-2)]
    assert rows[0][3] == pytest.approx(512.0, rel=1e-3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.uint8, torch.int8])
def test_the_norm_of_millions_of_values_off_the_host_kernel_is_accurate(dtype):
    # torch's float32 norm on the CPU was off by 1e-4 relative on a few million values (an image batch as uint8)
    torch.manual_seed(0)
    t = (torch.randn(3_000_000, dtype=torch.float64) * 50).to(dtype)
    buf = StatBuffer()
    buf.add(t)
    (row,) = buf.collect()
    want = t.double().norm().item()
    assert abs(row[3] - want) / want < 1e-6
    assert abs(row[2] - t.double().mean().item()) <= 1e-5 * max(1.0, abs(t.double().mean().item()))


def test_checksums_of_conjugate_and_negated_views_are_those_of_their_values():
    # a conj or neg view's memory holds the values before: the CRC was the original's, and xor raised
    x = torch.randn(5, dtype=torch.complex64)
    want = "%08x" % zlib.crc32(x.conj().resolve_conj().numpy().tobytes())
    assert tensor_checksum(x.conj()) == want != tensor_checksum(x)
    assert tensor_xor(x.conj()) == tensor_xor(x.conj().resolve_conj())
    f = torch.arange(1.0, 6.0)
    assert tensor_checksum(torch._neg_view(f)) == "%08x" % zlib.crc32((-f).numpy().tobytes())
    assert tensor_xor(torch._neg_view(f)) == tensor_xor(-f) != tensor_xor(f)


def test_xor_of_a_0_dim_integer_is_its_value_as_a_64_bit_word():
    # as the reference writes it; a 0-dim float's is its value
    items, _, _ = summarise([torch.tensor(7), torch.tensor(True), torch.tensor(-3, dtype=torch.int32),
                             torch.tensor(1.5)], summary_mode="xor")
    assert [i["md5"] for i in items] == ["0x0000000000000007", "0x0000000000000001", "0xfffffffffffffffd", 1.5]


def test_distributed_arguments_and_memory_formats_are_described_as_the_reference_describes_them():
    # they were written as null: a MAX all_reduce looked like a SUM one, and a batch of P2P ops had no data
    import torch.distributed as dist

    op = object.__new__(dist.P2POp)   # (its constructor asks for a process group; test_distributed runs one)
    op.op, op.tensor, op.peer, op.group, op.tag = dist.isend, torch.ones(3), 1, None, 0
    items, _, _ = summarise([dist.ReduceOp.MAX, dist.ReduceOp.SUM, torch.channels_last, op])
    assert items[0] == {"type": "torch.distributed.ReduceOp", "value": "RedOpType.MAX"}
    assert items[1]["value"] == "RedOpType.SUM"
    assert items[2] == {"type": "torch.memory_format", "format": "channels_last"}
    p2p = items[3]
    assert p2p["class_type"] == "torch.distributed.P2POp" and (p2p["op"], p2p["peer"], p2p["tag"]) == ("isend", 1, 0)
    assert p2p["tensor"]["shape"] == [3] and p2p["tensor"]["Max"] == 1.0


def test_forgetting_a_tensor_forgets_the_views_of_its_base_on_the_device_path():
    """A collective writes a flat buffer through C++ (no version bump): the remembered statistics of its views
    (a parameter's main_grad) go too, on the device path (tensors the host reader does not take) as in the
    reader (test_distributed.py's collective test)."""
    flat = torch.ones(8)
    view, other = flat[:4], torch.ones(4)
    buf = StatBuffer()
    first, kept = buf.add(view), buf.add(other)
    assert buf.add(view) == first                  # met again unchanged: the same slot
    with torch.no_grad():
        flat.data.copy_(torch.full((8,), 3.0))     # written through .data: no bump the cache can see
    buf.forget(flat)
    again = buf.add(view)
    assert again != first and buf.add(other) == kept   # an unrelated tensor stays remembered
    rows = buf.collect()
    assert rows[first][0] == 1.0 and rows[again][0] == 3.0
