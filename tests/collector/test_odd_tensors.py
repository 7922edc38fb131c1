"""Tensors that torch's reductions refuse (tbprobe/collector/pytorch/odd_tensors.py) get whole items, and the
module or operator that meets one keeps its record.

Each kind's statistics are checked against the same statistics of its dense equivalent, computed here with plain
torch in float64: the dense form of a sparse tensor (implicit zeros included), the dequantized values of a
quantized tensor, and a nested tensor's components put end to end.
"""
import glob
import json
import math
import os
import zlib

import pytest
import torch
from conftest import make_debugger, rank_dirs

from tbprobe.collector.pytorch import odd_tensors


def _dump_data(tmp_path) -> dict:
    """The records of the one rank's dump.json under tmp_path/dump."""
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump.json")) as f:
        return json.load(f)["data"]


# torch's notes on these kinds' state (prototype, beta, deprecated), not findings of these tests
pytestmark = [pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
              pytest.mark.filterwarnings("ignore:Sparse CSR tensor support:UserWarning"),
              pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
              pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")]


def _sparse_with_duplicates() -> torch.Tensor:
    # uncoalesced: (0, 1) is given twice and sums to 3.5; 13 of the 16 elements are implicit zeros
    i = torch.tensor([[0, 0, 2, 3], [1, 1, 2, 0]])
    v = torch.tensor([1.5, 2.0, -4.0, 0.25])
    return torch.sparse_coo_tensor(i, v, (4, 4))


def _kinds() -> dict:
    torch.manual_seed(0)
    dense = torch.randn(6, 4)
    dense[dense.abs() < 0.8] = 0.0      # some sparsity
    blocky = torch.zeros(4, 4)
    blocky[:2, 2:] = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    q = torch.quantize_per_tensor(torch.randn(5), 0.05, 3, torch.qint8)
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    return {
        # name: (the odd tensor, its dense logical values as a flat float64 tensor, the shape the item reports)
        "sparse coo, duplicates": (_sparse_with_duplicates(), _sparse_with_duplicates().to_dense(), [4, 4]),
        "sparse csr": (dense.to_sparse_csr(), dense, [6, 4]),
        "sparse csc": (dense.to_sparse_csc(), dense, [6, 4]),
        "sparse bsr": (blocky.to_sparse_bsr((2, 2)), blocky, [4, 4]),
        "nested strided": (torch.nested.nested_tensor([a, b]), torch.cat([a.flatten(), b.flatten()]), [2, -1, 3]),
        "nested jagged": (torch.nested.nested_tensor([a, b], layout=torch.jagged),
                          torch.cat([a.flatten(), b.flatten()]), [2, -1, 3]),
        "quantized": (q, q.dequantize(), [5]),
        "mkldnn": (dense.to_mkldnn(), dense, [6, 4]),
        "float8": (dense.to(torch.float8_e4m3fn), dense.to(torch.float8_e4m3fn).float(), [6, 4]),
        "uint16": (torch.tensor([0, 7, 65535, 3]).to(torch.uint16), torch.tensor([0, 7, 65535, 3]), [4]),
    }


def _expected(values: torch.Tensor) -> dict:
    v = values.to(torch.float64).flatten()
    return {"Max": v.max().item(), "Min": v.min().item(), "Mean": v.mean().item(),
            "Norm": torch.linalg.vector_norm(v).item(), "zero_count": int((v == 0).sum()),
            "nan_count": 0, "inf_count": 0}


def _saved_items(tmp_path, values: dict, summary_mode: str = "statistics", task: str = "statistics") -> tuple:
    dbg = make_debugger(tmp_path, level="debug", steps=1, summary_mode=summary_mode, task=task)
    for name, v in values.items():
        dbg.save(v, name)
    dbg.step()
    dbg.close()
    rank = rank_dirs(str(tmp_path / "dump"))[0]
    with open(os.path.join(rank, "debug.json")) as f:
        data = json.load(f)["data"]
    return {k.rsplit(".", 2)[0]: v for k, v in data.items()}, dbg, rank


def test_every_kind_gets_the_statistics_of_its_dense_values(tmp_path):
    kinds = _kinds()
    items, dbg, _ = _saved_items(tmp_path, {name: t for name, (t, _, _) in kinds.items()})
    assert dbg.hook_errors == 0
    for name, (t, dense, shape) in kinds.items():
        item = items[name]
        assert item["dtype"] == str(t.dtype), name
        assert item["shape"] == shape, name
        want = _expected(dense)
        for key in ("Max", "Min", "Mean", "Norm"):
            assert item[key] == pytest.approx(want[key], rel=1e-6), (name, key)
        for key in ("zero_count", "nan_count", "inf_count"):
            assert item[key] == want[key], (name, key)
        assert list(item) == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad",
                              "zero_count", "nan_count", "inf_count"], name
    # integer values keep integer extremes, dequantized ones are real numbers
    assert items["uint16"]["Max"] == 65535 and isinstance(items["uint16"]["Max"], int)
    assert isinstance(items["quantized"]["Max"], float)


def test_a_sparse_tensor_with_a_nan_counts_in_the_step_health(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    i = torch.tensor([[0, 1], [0, 1]])
    t = torch.sparse_coo_tensor(i, torch.tensor([float("nan"), 2.0]), (3, 3))
    big = torch.sparse_coo_tensor(torch.tensor([[2], [2]]), torch.tensor([-7.0]), (3, 3))
    items, dbg, _ = _saved_items(tmp_path, {"bad": t, "big": big})
    item = items["bad"]
    assert math.isnan(item["Max"]) and math.isnan(item["Min"])
    assert (item["nan_count"], item["inf_count"], item["zero_count"]) == (1, 0, 7)
    (events,) = glob.glob(os.path.join(str(tmp_path / "dump") + "_tb", "events", "*"))
    acc = EventAccumulator(events)
    acc.Reload()
    assert [e.value for e in acc.Scalars("tbprobe/nonfinite_tensors")] == [1.0]
    assert [e.value for e in acc.Scalars("tbprobe/max_abs")] == [7.0]


def test_the_health_of_rows_filled_at_once():
    from tbprobe.collector.pytorch.stats import StatBuffer

    sb = StatBuffer()
    sb.fill_row({}, odd_tensors.stats_row(torch.tensor([-3.0, 2.0]).to_sparse()))
    sb.fill_row({}, odd_tensors.stats_row(torch.tensor([float("inf"), 1.0]).to_sparse()))
    nonfinite, max_abs, values = sb.host_health()
    assert (nonfinite, max_abs, values) == (1, 3.0, True)
    sb.reset()
    assert sb.host_health() == (0, 0.0, False)


@pytest.mark.parametrize("mode", ["md5", "xor"])
def test_checksums_read_the_defining_bytes(tmp_path, mode):
    coalesced = _sparse_with_duplicates().coalesce()
    changed = torch.sparse_coo_tensor(coalesced.indices(), coalesced.values() + 1, (4, 4))
    nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.zeros(1, 3)])
    items, dbg, _ = _saved_items(tmp_path, {"raw": _sparse_with_duplicates(), "coalesced": coalesced,
                                           "changed": changed, "nested": nested}, summary_mode=mode)
    assert dbg.hook_errors == 0
    assert items["raw"]["md5"] == items["coalesced"]["md5"]       # the same tensor, however it is stored
    assert items["raw"]["md5"] != items["changed"]["md5"]
    assert items["nested"]["md5"]


def test_task_tensor_saves_a_sparse_and_a_nested_tensor_whole(tmp_path):
    sparse = _sparse_with_duplicates()
    nested = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)])
    items, dbg, rank = _saved_items(tmp_path, {"sparse": sparse, "nested": nested, "mkldnn": torch.ones(2).to_mkldnn()},
                                    task="tensor")
    assert dbg.hook_errors == 0
    folder = os.path.join(rank, "dump_tensor_data")
    back = torch.load(os.path.join(folder, items["sparse"]["data_name"]))
    assert torch.equal(back.to_dense(), sparse.to_dense())
    back = torch.load(os.path.join(folder, items["nested"]["data_name"]))
    assert all(torch.equal(x, y) for x, y in zip(back.unbind(), nested.unbind()))
    assert torch.equal(torch.load(os.path.join(folder, items["mkldnn"]["data_name"])), torch.ones(2))


def test_sparse_embedding_gradients_at_l0(tmp_path):
    """nn.Embedding(sparse=True) hands its weight a sparse gradient: the parameter gradient's record is there,
    with the dense gradient's statistics, and training is bitwise the same."""
    def train(dbg):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(50, 8, sparse=True), torch.nn.Linear(8, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        idx = torch.randint(0, 50, (3, 5))
        grads = []
        for _ in range(2):
            if dbg:
                dbg.start(model=model)
            loss = model(idx).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            grads.append(model[0].weight.grad.to_dense().clone())
            opt.step()
            if dbg:
                dbg.stop()
                dbg.step()
        return loss.detach(), list(model.parameters()), grads

    plain_loss, plain_params, _ = train(None)
    dbg = make_debugger(tmp_path, level="L0", steps=2)
    loss, params, grads = train(dbg)
    dbg.close()
    assert torch.equal(loss, plain_loss) and all(torch.equal(a, b) for a, b in zip(params, plain_params))
    assert dbg.hook_errors == 0
    rank = rank_dirs(str(tmp_path / "dump"), 1)[0]
    with open(os.path.join(rank, "dump.json")) as f:
        data = json.load(f)["data"]
    item = data["Module.0.Embedding.parameters_grad.0"]["weight"][0]
    want = _expected(grads[1])
    assert item["shape"] == [50, 8]
    assert item["zero_count"] == want["zero_count"] > 0
    for key in ("Max", "Min", "Mean", "Norm"):
        assert item[key] == pytest.approx(want[key], rel=1e-6, abs=1e-12), key


def test_transformer_encoder_eval_with_nested_tensors_at_l0(tmp_path):
    """TransformerEncoder in eval turns a padded batch into a nested tensor for its layers: the layers keep their
    records (PyTorch runs the layers' slow path while hooks are on them)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).eval()
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    dbg.start(model=enc)
    with torch.no_grad():
        enc(x, src_key_padding_mask=mask)
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = _dump_data(tmp_path)
    item = data["Module.layers.0.TransformerEncoderLayer.forward.0"]["input_args"][0]
    assert item["shape"] == [2, -1, 8]           # the second sequence has 3 of its 5 positions
    assert item["Max"] == pytest.approx(max(x[0].max().item(), x[1, :3].max().item()))


def _collect_l1(tmp_path, fn, summary_mode="statistics", task="statistics"):
    dbg = make_debugger(tmp_path, level="L1", steps=1, summary_mode=summary_mode, task=task)
    dbg.start()
    out = fn()
    dbg.stop()
    dbg.step()
    dbg.close()
    return dbg, _dump_data(tmp_path), out


@pytest.mark.parametrize("summary_mode", ["statistics", "md5"])
def test_operators_inside_vmap_are_summarised_over_the_batch(tmp_path, summary_mode):
    """transformers builds its attention masks under torch.vmap (nested, one level per mask dimension): the
    operators called inside see BatchedTensors, whose batched statistics once made the step's read-back fail and
    switched the collector off. They are summarised, as the reference does, over the plain tensor under all vmap
    levels, under type "BatchedTensor" and that tensor's shape."""
    q_idx, kv_idx = torch.arange(6), torch.arange(5)

    def masks():
        inner = torch.vmap(lambda q, kv: (kv <= q) & (kv > q - 3), in_dims=(None, 0))
        return torch.vmap(inner, in_dims=(0, None))(q_idx, kv_idx)

    dbg, data, out = _collect_l1(tmp_path, masks, summary_mode)
    assert dbg.hook_errors == 0
    le = data["Tensor.__le__.0.forward"]
    # under both vmap levels: kv is [5] (batched on the inner level only), q is [6], the result [6, 5]
    assert [a["type"] for a in le["input_args"]] == ["BatchedTensor", "BatchedTensor"]
    assert [a["shape"] for a in le["input_args"]] == [[5], [6]]
    res = le["output"][0]
    assert res["type"] == "BatchedTensor" and res["dtype"] == "torch.bool" and res["shape"] == [6, 5]
    want = (kv_idx[None, :] <= q_idx[:, None])
    assert res["Max"] is True and res["Min"] is False
    if summary_mode == "statistics":
        assert res["Mean"] == pytest.approx(want.double().mean().item())
        assert res["zero_count"] == int((~want).sum())
    else:
        assert res["md5"] == "%08x" % zlib.crc32(want.contiguous().numpy().tobytes())
    final = data["Tensor.__and__.0.forward"]["output"][0]
    assert final["shape"] == [6, 5] and final["Mean"] == pytest.approx(out.double().mean().item()) \
        if summary_mode == "statistics" else final["shape"] == [6, 5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])   # float64: the kernels' path, not the C reader
def test_operators_inside_func_grad_are_grad_tracking_tensors(tmp_path, dtype):
    """Inside torch.func.grad every torch call wraps its result: the statistics are taken with the transforms'
    dispatch off (a detach once recursed until Python's limit)."""
    x = torch.tensor([1.0, -2.0, 3.0], dtype=dtype)
    dbg, data, g = _collect_l1(tmp_path, lambda: torch.func.grad(lambda t: (t * t).sum())(x))
    assert dbg.hook_errors == 0
    mul = data["Tensor.__mul__.0.forward"]
    assert [a["type"] for a in mul["input_args"]] == ["GradTrackingTensor"] * 2
    assert mul["input_args"][0]["shape"] == [3] and mul["input_args"][0]["Max"] == 3.0
    assert mul["output"][0]["Max"] == 9.0 and mul["output"][0]["Min"] == 1.0
    assert mul["output"][0]["Norm"] == pytest.approx(math.sqrt(1 + 16 + 81))
    assert torch.equal(g, 2 * x)


def test_per_sample_losses_inside_vmap_of_grad(tmp_path):
    """Per-sample gradients, torch.func's own example: vmap(grad(loss)) makes each call's loss a 0-dim float32
    wrapper, which the 0-dim fast path once read with .item() (refused inside vmap: a hook error, the record lost).
    Its statistics are those of the per-sample losses under it, and so is its shape (it was the wrapper's own,
    [], beside a Max and a Min apart)."""
    torch.manual_seed(0)
    w, xs = torch.randn(3), torch.randn(5, 3)

    def per_sample():
        return torch.func.vmap(torch.func.grad(lambda w, x: (w * x).sum()), in_dims=(None, 0))(w, xs)

    dbg, data, g = _collect_l1(tmp_path, per_sample)
    assert dbg.hook_errors == 0
    loss = data["Tensor.sum.0.forward"]["output"][0]
    assert loss["type"] == "GradTrackingTensor" and loss["dtype"] == "torch.float32" and loss["shape"] == [5]
    want = xs @ w
    assert loss["Max"] == pytest.approx(want.max().item()) and loss["Min"] == pytest.approx(want.min().item())
    assert loss["Mean"] == pytest.approx(want.mean().item())
    assert torch.equal(g, xs)


def test_task_tensor_saves_the_plain_tensor_under_a_batched_one(tmp_path):
    q_idx, kv_idx = torch.arange(4), torch.arange(3)
    fn = torch.vmap(torch.vmap(lambda q, kv: kv <= q, in_dims=(None, 0)), in_dims=(0, None))
    dbg, data, out = _collect_l1(tmp_path, lambda: fn(q_idx, kv_idx), task="tensor")
    assert dbg.hook_errors == 0
    res = data["Tensor.__le__.0.forward"]["output"][0]
    assert res["type"] == "BatchedTensor" and res["shape"] == [4, 3]
    saved = torch.load(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dump_tensor_data", res["data_name"]))
    assert torch.equal(saved, out) and saved.shape == (4, 3)


class _Wrap(torch.Tensor):
    """A __torch_dispatch__ wrapper subclass, as torchao's, NF4's and float8 training's are: no storage of its
    own, every result wrapped again."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype,
                                                   requires_grad=elem.requires_grad)

    def __init__(self, elem):
        self.elem = elem

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = torch.utils._pytree.tree_map_only
        out = func(*unwrap(_Wrap, lambda t: t.elem, args), **unwrap(_Wrap, lambda t: t.elem, kwargs or {}))
        return unwrap(torch.Tensor, cls, out)


class _Sealed(_Wrap):
    """A wrapper subclass that gives none of its values away."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.copy_.default, torch.ops.aten.detach.default):
            raise RuntimeError("sealed")
        return super().__torch_dispatch__(func, types, args, kwargs)


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
@pytest.mark.parametrize("summary_mode", ["statistics", "md5", "xor"])
def test_a_wrapper_subclass_is_summarised_and_the_step_kept(tmp_path, level, summary_mode):
    """One call on a wrapper subclass put tensors of its type into the step's statistics batch, whose read-back
    at the step's end failed: the whole step's dump was lost (msprobe writes the step, the call's statistics
    null). Its statistics are now computed through its own dispatch, those of the values inside it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    inner = torch.randn(3)
    dbg = make_debugger(tmp_path, level=level, steps=1, summary_mode=summary_mode)
    dbg.start(model=model)
    model(torch.randn(2, 4)).sum().backward()
    out = model[1](_Wrap(inner)) if level == "L0" else torch.relu(_Wrap(inner))
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0 and type(out) is _Wrap and torch.equal(out.elem, inner.relu())
    data = _dump_data(tmp_path)
    first = data["Module.0.Linear.forward.0" if level != "L1" else "Functional.linear.0.forward"]["output"][0]
    assert first["md5" if summary_mode == "xor" else "Max"]
    rec = data["Module.1.ReLU.forward.1" if level == "L0" else "Torch.relu.0.forward"]
    for item, values in ((rec["input_args"][0], inner), (rec["output"][0], inner.relu())):
        want = _expected(values)
        assert item["shape"] == [3] and item["dtype"] == "torch.float32"
        raw = values.contiguous().view(torch.uint8).numpy().tobytes()
        if summary_mode == "xor":
            words = [int.from_bytes((raw + bytes(8))[i:i + 8], "little") for i in range(0, len(raw), 8)]
            folded = 0
            for w in words:
                folded ^= w
            assert item["md5"] == "0x%016x" % folded and "Max" not in item
            continue
        for key in ("Max", "Min", "Mean", "Norm", "zero_count"):
            assert item[key] == pytest.approx(want[key]), key
        if summary_mode == "md5":
            assert item["md5"] == "%08x" % zlib.crc32(raw)


def test_a_wrapper_subclass_that_gives_no_values_gets_null_statistics(tmp_path):
    dbg, data, out = _collect_l1(tmp_path, lambda: torch.relu(_Sealed(torch.randn(3))))
    assert dbg.hook_errors == 0 and type(out) is _Sealed
    item = data["Torch.relu.0.forward"]["input_args"][0]
    assert item == {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3], "Max": None, "Min": None,
                    "Mean": None, "Norm": None, "requires_grad": False}


def test_statistics_that_cannot_be_read_back_lose_them_not_the_step(tmp_path, monkeypatch):
    """Whatever makes the step's batched read-back fail costs the statistics (null), not the step's records."""
    from tbprobe.collector.pytorch.stats import StatBuffer

    def broken(self):
        raise RuntimeError("forced failure")

    monkeypatch.setattr(StatBuffer, "collect", broken)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    dbg = make_debugger(tmp_path, level="mix", steps=2)
    for _ in range(2):
        with dbg.collect(model):
            model(torch.randn(2, 4)).sum().backward()
    dbg.close()
    assert dbg.hook_errors == 2
    for step in range(2):
        with open(os.path.join(rank_dirs(str(tmp_path / "dump"), step)[0], "dump.json")) as f:
            data = json.load(f)["data"]
        assert "Module.0.Linear.forward.0" in data and "Functional.linear.0.backward" in data


def test_md5_of_an_empty_tensor_is_the_checksum_of_no_bytes_and_of_a_meta_tensor_null(tmp_path):
    """msprobe writes "00000000" for an empty tensor in md5 mode and null for a meta tensor; the key was
    missing from both items."""
    class Take(torch.nn.Module):
        def forward(self, *xs):
            return xs[0]

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.take = Take()

        def forward(self, *xs):
            return self.take(*xs)

    model = Model()
    dbg = make_debugger(tmp_path, level="L0", steps=1, summary_mode="md5")
    dbg.start(model=model)
    model(torch.empty(0, 4), torch.empty(3, 4, device="meta"), torch.ones(2))
    dbg.stop()
    dbg.step()
    dbg.close()
    empty, meta, ones = _dump_data(tmp_path)["Module.take.Take.forward.0"]["input_args"]
    assert empty["md5"] == "00000000" and meta["md5"] is None
    assert ones["md5"] == "%08x" % zlib.crc32(torch.ones(2).numpy().tobytes())


def test_the_subclasses_the_reference_names_keep_their_type(tmp_path):
    """An AsyncCollectiveTensor (what a functional collective, DTensor's RowwiseParallel, returns) and a jagged
    nested tensor were written as "torch.Tensor"; the reference writes their own type (for the first with null
    statistics: tbprobe keeps the values, which the collective's wait makes there)."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    values = torch.tensor([1.0, -2.0, 3.0])
    jagged = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(1, 3)], layout=torch.jagged)
    dbg, data, _ = _collect_l1(tmp_path, lambda: (torch.relu(AsyncCollectiveTensor(values)), torch.mul(jagged, 2.0)))
    assert dbg.hook_errors == 0
    act = data["Torch.relu.0.forward"]["input_args"][0]
    assert act["type"] == "torch.distributed._functional_collectives.AsyncCollectiveTensor"
    assert act["Max"] == 3.0 and act["Min"] == -2.0
    nested = data["Torch.mul.0.forward"]["input_args"][0]
    assert nested["type"] == "torch.nested._internal.nested_tensor.NestedTensor" and nested["Max"] == 1.0
    assert data["Torch.mul.0.forward"]["input_args"][1] == {"type": "float", "value": 2.0}


@pytest.mark.parametrize("level, mode, task", [("L0", "statistics", "statistics"), ("mix", "statistics", "statistics"),
                                              ("L0", "md5", "statistics"), ("L0", "statistics", "tensor")])
def test_gradients_batched_by_autograd_grad_keep_the_steps_statistics(tmp_path, level, mode, task):
    """autograd.grad(..., is_grads_batched=True) runs the backward under torch's older vmap: the hooks' gradients
    have no storage and no functorch level. Their statistics were scheduled like any tensor's and failed the
    step's read-back: every item of the step null, a hook error. They are BatchedTensor items with null
    statistics now, the rest of the step as usual."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    dbg = make_debugger(tmp_path, level=level, steps=1, summary_mode=mode, task=task)
    dbg.start(model=model)
    x = torch.randn(2, 3, requires_grad=True)
    torch.autograd.grad(model(x), x, torch.eye(6).view(6, 2, 3), is_grads_batched=True)
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = _dump_data(tmp_path)
    assert data["Module.0.Linear.forward.0"]["output"][0]["Max"] is not None
    grad = data["Module.0.Linear.backward.0"]["input"][0]
    assert grad["type"] == "BatchedTensor" and grad["Max"] is None and "data_name" not in grad
