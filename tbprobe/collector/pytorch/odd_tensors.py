"""Tensors that torch's reductions refuse, and how tbprobe summarises them anyway.

These are nested tensors (strided or jagged), sparse tensors (COO and the compressed layouts), quantized tensors,
mkldnn tensors, and dtypes with no CPU reduction (float8, uint16/32/64). Left to the common path, one of them made
the whole record of the module or operator that met it fail. They are rare, so their statistics are computed here
at once in float64, over the tensor's logical values:
- a sparse tensor's implicit zeros count, so Mean is Sum / numel as for the dense tensor;
- a quantized tensor is summarised dequantized (the real values it stands for).

functorch's wrappers (tensors met inside torch.func.vmap or torch.func.grad, e.g. HuggingFace's attention masks,
which transformers builds under vmap) have no storage of their own, and reductions on them give batched results
that cannot leave the transform: `functorch_view` gives the plain tensor underneath, which is summarised instead.

A nested tensor's shape gives -1 for a ragged dimension. A checksum reads the bytes that define the tensor:
- a nested tensor: its components in order;
- a sparse tensor: the indices and values of its coalesced COO form;
- a quantized tensor: its integer representation;
- an mkldnn tensor: its dense form.
"""
import math
from typing import List, Optional, Tuple

import torch

__all__ = ["REDUCIBLE", "ROW_KEYS", "is_odd", "shape_of", "stats_row", "checksum_source", "savable",
           "functorch_view", "legacy_batched"]

# dtypes with CPU reductions (aminmax, sum, vector_norm): complex through abs, bool through float
REDUCIBLE = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
                        torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128})
_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
# the item keys of stats_row's values, in its order
ROW_KEYS = ("Max", "Min", "Mean", "Norm", "zero_count", "nan_count", "inf_count")


_functorch = getattr(torch._C, "_functorch", None)


def functorch_view(t: torch.Tensor) -> Optional[Tuple[str, List[int], torch.Tensor]]:
    """None for a tensor that is not a functorch wrapper; else (type, shape, plain) as the reference reports it:
    a BatchedTensor (inside vmap) has type "BatchedTensor", a GradTrackingTensor (inside torch.func.grad)
    "GradTrackingTensor". `plain` is the tensor under every functorch level, whose values the statistics describe,
    and the shape is its own: the batch dimensions of every vmap level included, as the reference gives a
    BatchedTensor's. (A GradTrackingTensor's own shape, which a wrapper inside vmap has per sample, stood beside
    the statistics of the whole batch: a scalar's "shape" [] with a Max and a Min apart.)"""
    if _functorch is None or not _functorch.is_functorch_wrapped_tensor(t):
        return None
    kind = "BatchedTensor" if _functorch.is_batchedtensor(t) else "GradTrackingTensor"
    plain = t
    while _functorch.is_functorch_wrapped_tensor(plain):
        plain = _functorch.get_unwrapped(plain)
    return kind, list(plain.shape), plain


def legacy_batched(t: torch.Tensor) -> bool:
    """Whether `t` is a tensor of torch's older vmap (the gradients a backward hook gets under
    `autograd.grad(..., is_grads_batched=True)`): no storage, no functorch level to unwrap, and statistics of it
    computed at once would stay batched where the step's read-back stacks them (every item of that step lost)."""
    return not torch._C._has_storage(t) and "Batched" in str(torch._C._dispatch_keys(t))


def is_odd(t: torch.Tensor) -> bool:
    """Whether `t` needs this module (see the top)."""
    return t.layout is not torch.strided or t.is_nested or t.dtype not in REDUCIBLE


def shape_of(t: torch.Tensor) -> List[int]:
    """The shape an item reports: a nested tensor's is [components, dims...], -1 where the components differ."""
    if not t.is_nested:
        return list(t.shape)
    sizes = [tuple(c.shape) for c in t.unbind()]
    if not sizes:
        return [0]
    first = sizes[0]
    return [len(sizes)] + [first[d] if all(s[d] == first[d] for s in sizes) else -1 for d in range(len(first))]


def _values(t: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """The explicitly stored values as one flat tensor, and how many of the tensor's elements are implicit zeros."""
    if t.is_nested:
        parts = [c.reshape(-1) for c in t.unbind()]
        return (torch.cat(parts) if parts else torch.zeros(0)), 0
    if t.layout is torch.sparse_coo:
        v = t.coalesce().values().reshape(-1)
        return v, t.numel() - v.numel()
    if t.layout in _COMPRESSED:
        v = t.values().reshape(-1)
        return v, t.numel() - v.numel()
    if t.layout is torch._mkldnn:
        return t.to_dense().reshape(-1), 0
    if t.is_quantized:
        return t.dequantize().reshape(-1), 0
    return t.reshape(-1), 0


def stats_row(t: torch.Tensor) -> Optional[list]:
    """[Max, Min, Mean, Norm, zero_count, nan_count, inf_count] of `t`'s logical values, or None when it has
    none. Max and Min are ints for integer values and bools for bool values, as for any other item."""
    with torch.no_grad():
        v, implicit = _values(t.detach())
        integral = not (v.is_floating_point() or v.is_complex()) and v.dtype is not torch.bool
        boolean = v.dtype is torch.bool
        if v.is_complex():
            v = v.abs()
        v = v.to(torch.float64)
        n = v.numel() + implicit
        if n == 0:
            return None
        if v.numel():
            low, high = torch.aminmax(v)
            mx, mn = high.item(), low.item()
            if implicit:   # (a NaN stays NaN, as in the dense tensor's reduction)
                mx = mx if mx != mx else max(mx, 0.0)
                mn = mn if mn != mn else min(mn, 0.0)
        else:
            mx = mn = 0.0
        mean = v.sum().item() / n
        # a 0-dim tensor's four statistics are its value, as the reference writes them
        norm = mx if t.dim() == 0 and not t.is_nested else torch.linalg.vector_norm(v).item()
        counts = [int((v == 0).sum()) + implicit, int(torch.isnan(v).sum()), int(torch.isinf(v).sum())]
    if boolean:
        mx, mn = bool(mx), bool(mn)
    elif integral and math.isfinite(mx) and math.isfinite(mn):
        mx, mn = int(mx), int(mn)
    return [mx, mn, mean, norm] + counts


def checksum_source(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 tensor of the bytes that define `t` (see the top), for the md5 and xor checksums."""
    with torch.no_grad():
        t = t.detach()
        if t.is_nested:
            parts = list(t.unbind())
        elif t.layout is torch.sparse_coo or t.layout in _COMPRESSED:
            c = (t if t.layout is torch.sparse_coo else t.to_sparse_coo()).coalesce()
            parts = [c.indices(), c.values()]
        elif t.layout is torch._mkldnn:
            parts = [t.to_dense()]
        elif t.is_quantized:
            parts = [t.int_repr()]
        else:
            parts = [t]
        flat = [p.contiguous().reshape(-1).view(torch.uint8) for p in parts]
        return torch.cat(flat) if flat else torch.zeros(0, dtype=torch.uint8)


def savable(t: torch.Tensor) -> torch.Tensor:
    """What task "tensor" saves for `t`: the tensor itself, but an mkldnn tensor (which torch.save refuses) dense."""
    return t.to_dense() if t.layout is torch._mkldnn else t
