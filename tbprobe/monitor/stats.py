"""Statistics of a tensor, computed on its device, and the per-step batch that is read back once.

Nothing here synchronises with the device: each tensor's statistics become a small vector on the same device,
queued in a :class:`StatBatch`; at the end of the step the vectors are stacked per device and copied to
the host in one transfer.
"""
import functools
from typing import Callable, Dict, List, Sequence, Tuple, TypeVar

import numpy as np
import torch

__all__ = ["tensor_stats", "foreach_norms", "StatBatch", "unobserved"]

F = TypeVar("F", bound=Callable)


def unobserved(fn: F) -> F:
    """Run `fn` with torch-function interception off. The collector records operators through a
    TorchFunctionMode; without this, a run with both tools on would record the monitor's own statistics
    (aminmax, mean, count_nonzero, ...) as if the model had called them, and shift every API counter."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _vector_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64   # (MPS has no float64)


def _mean(x: torch.Tensor) -> torch.Tensor:
    return _summed(x, torch.mean)


def _norm(x: torch.Tensor) -> torch.Tensor:
    return _summed(x, torch.linalg.vector_norm)


def _summed(x: torch.Tensor, fn: Callable) -> torch.Tensor:
    """fn(x) (a mean or a norm) without the overflow of a float32 sum: a causal mask's finfo.min gives a mean of
    -1.6e38, whose sum is past float32's range, and a norm past 1.8e19 squares past it; in float32 both read
    -inf/inf, which every step raised a false AnomalyNan. CUDA sums in float64 (a reduction is bound by memory
    there, not by arithmetic); the CPU, where float64 costs ~5x, sums in float32 and again in float64 only when
    that overflowed (a host sync costs nothing there); other devices in float32."""
    kind = x.device.type
    if kind == "cuda":
        return fn(x, dtype=torch.float64)
    v = fn(x, dtype=torch.float32)
    if kind == "cpu" and not torch.isfinite(v).item() and torch.isfinite(x).all().item():
        return fn(x, dtype=torch.float64)
    return v


@unobserved
@torch.no_grad()
def tensor_stats(x: torch.Tensor, ops: Sequence[str], eps: float) -> torch.Tensor:
    """Vector of ``ops`` (canonical order) for ``x`` (float64, float32 on MPS); NaN for an empty tensor. No host
    sync off the CPU."""
    x = x.detach()
    dtype = _vector_dtype(x.device)
    if x.numel() == 0:
        return torch.full((len(ops),), float("nan"), device=x.device, dtype=dtype)
    if x.layout != torch.strided:
        return _sparse_stats(x, ops, eps, dtype)
    if x.is_complex():
        x = x.abs()
    if len(ops) == 1 and ops[0] == "norm":  # the default config: one kernel, no stack
        return _norm(x).to(dtype).reshape(1)
    out: List[torch.Tensor] = []
    lo = hi = None
    if "min" in ops or "max" in ops:
        lo, hi = torch.aminmax(x)
    for op in ops:
        if op == "min":
            out.append(lo.float())
        elif op == "max":
            out.append(hi.float())
        elif op == "mean":
            out.append(_mean(x))
        elif op == "norm":
            out.append(_norm(x))
        elif op == "zeros":
            out.append(torch.count_nonzero(x.abs() < eps).float() / x.numel())
        elif op == "nans":
            out.append(torch.count_nonzero(torch.isnan(x)).float())
    return torch.stack([v.to(dtype) for v in out])


def _sparse_stats(x: torch.Tensor, ops: Sequence[str], eps: float, dtype: torch.dtype) -> torch.Tensor:
    """The statistics of a sparse tensor (an nn.Embedding(sparse=True) gradient) as of its dense equivalent, from
    its stored values: aminmax and the norm kernels have no sparse implementation, and the NotImplementedError
    lost every statistic of the optimizer step it was in. Duplicate indices are summed first (coalesce); the
    elements not stored are zeros."""
    if x.layout == torch.sparse_coo:
        x = x.coalesce()
    vals = x.values()
    if vals.is_complex():
        vals = vals.abs()
    implicit = x.numel() - vals.numel()   # (shapes only: no host sync)
    zero = torch.zeros((), device=vals.device, dtype=vals.dtype)
    out: List[torch.Tensor] = []
    for op in ops:
        if op in ("min", "max"):
            if vals.numel() == 0:
                v = zero
            else:
                v = vals.min() if op == "min" else vals.max()
                if implicit:
                    v = torch.minimum(v, zero) if op == "min" else torch.maximum(v, zero)
            out.append(v.float())
        elif op == "mean":
            out.append(_summed(vals, torch.sum) / x.numel())
        elif op == "norm":
            out.append(_norm(vals))
        elif op == "zeros":
            out.append((torch.count_nonzero(vals.abs() < eps).float() + implicit) / x.numel())
        elif op == "nans":
            out.append(torch.count_nonzero(torch.isnan(vals)).float())
    return torch.stack([v.to(dtype) for v in out])


@unobserved
@torch.no_grad()
def foreach_norms(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """L2 norms of many tensors with the fused multi-tensor kernel where torch has one (float32, length-1 each)."""
    groups: Dict[Tuple[torch.device, torch.dtype], List[int]] = {}
    result: List[torch.Tensor] = [None] * len(tensors)  # type: ignore[list-item]
    for i, t in enumerate(tensors):
        if t.layout != torch.strided:   # (a sparse gradient: no fused or plain norm kernel for it)
            result[i] = tensor_stats(t, ["norm"], 0.0).float()
            continue
        groups.setdefault((t.device, t.dtype), []).append(i)
    for (_, _dtype), idx in groups.items():
        chunk = [tensors[i].detach() for i in idx]
        try:
            norms = torch._foreach_norm(chunk, 2, dtype=torch.float32)  # one launch for the whole group
        except (RuntimeError, TypeError, AttributeError):
            norms = [torch.linalg.vector_norm(t, dtype=torch.float32) for t in chunk]
        for i, n in zip(idx, norms):
            result[i] = n.reshape(1) if tensors[i].numel() else torch.full((1,), float("nan"), device=n.device)
    return result


class StatBatch:
    """The statistics gathered during one step: names (``<name>/<metric>``) and their device vectors."""

    def __init__(self) -> None:
        self.keys: List[str] = []
        self.values: List[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: str, vector: torch.Tensor) -> None:
        # list.append is atomic under the GIL: backward hooks may run on autograd's device threads.
        self.keys.append(key)
        self.values.append(vector)

    @unobserved
    def read_back(self, width: int) -> np.ndarray:
        """All vectors as one float64 ``[n, width]`` host array: one stack and one copy per device."""
        keys, values = self.keys, self.values
        out = np.full((len(keys), width), np.nan, dtype=np.float64)
        by_device: Dict[torch.device, List[int]] = {}
        for i, v in enumerate(values):
            by_device.setdefault(v.device, []).append(i)
        for device, idx in by_device.items():
            dtype = _vector_dtype(device)
            stacked = torch.stack([values[i].to(dtype) for i in idx])
            host = stacked.cpu().numpy()  # the step's only device->host transfer for this device
            out[idx, :] = host
        return out

    def clear(self) -> None:
        self.keys = []
        self.values = []
