"""Statistics taken around the optimizer step: weight gradients as the optimizer sees them (after any
data-parallel reduction), weights before and after the step, Adam's moments and the Adam update."""
from typing import TYPE_CHECKING, List, Tuple

import torch

from tbprobe.monitor.stats import foreach_norms, tensor_stats, unobserved
from tbprobe.monitor.targets import trainable

if TYPE_CHECKING:  # pragma: no cover
    from tbprobe.monitor.trainer_mon import TrainerMon

__all__ = ["record_pre_step", "record_post_step"]


def _stats_many(mon: "TrainerMon", metric: str, items: List[Tuple[str, torch.Tensor]]) -> None:
    items = [(name, t) for name, t in items if t.numel()]   # (an empty tensor has no series: TrainerMon.record)
    if not items:
        return
    if mon.config.ops == ["norm"]:
        vectors = foreach_norms([t for _, t in items])  # one fused kernel for every tensor
    else:
        vectors = [tensor_stats(t, mon.config.ops, mon.config.eps) for _, t in items]
    for (name, t), vec in zip(items, vectors):
        mon.record(f"{name}/{metric}", vec, t)


def _state(optimizer, param) -> dict:
    try:
        return optimizer.state.get(param, {}) if hasattr(optimizer, "state") else {}
    except (TypeError, AttributeError):
        return {}


@unobserved
@torch.no_grad()
def record_pre_step(mon: "TrainerMon", optimizer, grads: bool = True) -> None:
    """`grads`: False for a step given a closure, whose gradients are computed inside it (record_post_step)."""
    cfg = mon.config
    params = trainable(mon.selection.params)
    if cfg.wg_distribution and grads:
        _record_grads(mon, params)
    if cfg.param_distribution:
        _stats_many(mon, "param", [(n, _local(p)) for n, p in params])
    if cfg.mv_distribution:
        for key in ("exp_avg", "exp_avg_sq"):
            items = []
            for name, p in params:
                t = _state(optimizer, p).get(key)
                if isinstance(t, torch.Tensor):
                    items.append((name, _local(t)))
            _stats_many(mon, key, items)


def _record_grads(mon: "TrainerMon", params) -> None:
    grads = []
    for name, p in params:
        g = p.main_grad if mon.params_have_main_grad and hasattr(p, "main_grad") else p.grad
        if g is None:
            continue
        if g.__class__.__name__ == "DTensor":  # FSDP2: the local shard, statistics per rank
            g = g.to_local()
        grads.append((name, g))
    _stats_many(mon, "grad", grads)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if t.__class__.__name__ == "DTensor" else t


@unobserved
@torch.no_grad()
def record_post_step(mon: "TrainerMon", optimizer, grads: bool = False) -> None:
    """`grads`: the step was given a closure; its gradients are those its last closure call left (LBFGS
    evaluates it several times; Adam or SGD once, before the update)."""
    cfg = mon.config
    params = trainable(mon.selection.params)
    if cfg.wg_distribution and grads:
        _record_grads(mon, params)
    if cfg.param_distribution:
        _stats_many(mon, "param_updated", [(n, _local(p)) for n, p in params])
    if cfg.ur_distribution:
        _adam_update(mon, optimizer, params)


def _adam_update(mon: "TrainerMon", optimizer, params) -> None:
    """lr * m_hat / (sqrt(v_hat) + eps) from the state after the step, and its norm relative to the weight's."""
    group_of = {}
    for group in getattr(optimizer, "param_groups", []):
        for p in group["params"]:
            group_of[id(p)] = group
    ratios = []
    for name, p in params:
        st = _state(optimizer, p)
        group = group_of.get(id(p))
        # (with amsgrad the step divides by the running maximum of the second moment)
        second = "max_exp_avg_sq" if group is not None and group.get("amsgrad") else "exp_avg_sq"
        m, v, step = st.get("exp_avg"), st.get(second), st.get("step")
        if m is None or v is None or step is None or group is None or "betas" not in group:
            continue
        t = float(step)
        b1, b2 = group["betas"]
        lr = float(group.get("lr", 1.0))
        eps = float(group.get("eps", 1e-8))
        m, v = _local(m), _local(v)
        update = lr * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
        mon.record(f"{name}/adam_update", tensor_stats(update, mon.config.ops, mon.config.eps), update)
        ratios.append((name, update, _local(p)))
    width = len(mon.config.ops)
    col = mon.config.ops.index("norm") if "norm" in mon.config.ops else None
    for name, update, w in ratios:
        ratio = torch.linalg.vector_norm(update, dtype=torch.float32) / (
            torch.linalg.vector_norm(w, dtype=torch.float32) + mon.config.eps
        )
        vec = torch.full((width,), float("nan"), device=ratio.device)
        if col is not None:
            vec[col] = ratio
        mon.record(f"{name}/update_ratio", vec, w)

