"""Call one of every kind of torch operation at L1 under a collector (tbprobe or msprobe) and print the recorded
forward names, one per line. The tests run it with both tools and compare (test_api_coverage.py).

usage: api_zoo.py TOOL RISK_LEVEL DUMP_PATH      (RISK_LEVEL: default | ALL | CORE | FOCUS)

Each call is one line of CALLS: an operator form, a method, a torch.* or torch.linalg function, a constructor, a
conversion, a reflected operator, gradient clipping and a foreach AdamW step. A call that fails is skipped by both
tools alike.
"""
import json
import logging
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def _calls(x, y, i, b, idx):
    def c():
        return x.clone()

    def j():
        return i.clone()

    conv_in, conv_w = x.view(1, 1, 4, 4), y[:2, :2].reshape(1, 1, 2, 2)
    return [
        # Python operators, plain, reflected and in place
        lambda: x + y, lambda: x - y, lambda: x * y, lambda: x / y, lambda: x // y, lambda: x % y, lambda: x ** 2,
        lambda: x @ y, lambda: -x, lambda: +x, lambda: abs(x), lambda: ~b, lambda: b & b, lambda: b | b,
        lambda: b ^ b, lambda: 2 + x, lambda: 2 - x, lambda: 2 * x, lambda: 2 / x, lambda: 2 // x, lambda: 2 % x,
        lambda: 2 ** x, lambda: x < y, lambda: x <= y, lambda: x > y, lambda: x >= y, lambda: x == y,
        lambda: x != y, lambda: i << 1, lambda: i >> 1, lambda: 1 << i, lambda: 1 >> i, lambda: i & 3,
        lambda: 3 & i, lambda: i | 3, lambda: 3 | i, lambda: i ^ 3, lambda: 3 ^ i,
        lambda: c().__iadd__(y), lambda: c().__isub__(y), lambda: c().__imul__(y), lambda: c().__itruediv__(y),
        lambda: c().__ifloordiv__(y), lambda: c().__imod__(y), lambda: c().__ipow__(2), lambda: j().__ilshift__(1),
        lambda: j().__irshift__(1), lambda: j().__iand__(7), lambda: j().__ior__(1), lambda: j().__ixor__(2),
        lambda: _augmented(c(), y), lambda: _setitem(c(), y),
        # methods and functions under several names
        lambda: x.neg(), lambda: x.abs(), lambda: x.positive(), lambda: torch.neg(x), lambda: torch.abs(x),
        lambda: torch.mm(x, y), lambda: torch.matmul(x, y), lambda: x.mm(y), lambda: x.sum(), lambda: x.mean(),
        lambda: torch.sum(x), lambda: torch.where(b, x, y), lambda: torch.einsum("ij,jk->ik", x, y),
        lambda: x.masked_fill(b, 0.0), lambda: torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
        lambda: torch.linalg.vector_norm(x), lambda: torch.linalg.norm(x), lambda: torch.norm(x),
        lambda: torch.linalg.matrix_norm(x), lambda: torch.linalg.inv(x), lambda: torch.linalg.det(x),
        lambda: torch._foreach_norm([x, y]), lambda: torch._foreach_add([x], [y]), lambda: torch._foreach_mul([x], 2.0),
        lambda: x.trace(), lambda: x.conj(), lambda: x.resolve_conj(), lambda: torch.allclose(x, y),
        lambda: torch.unique(i), lambda: torch.meshgrid(x[0], y[0], indexing="ij"), lambda: c().copy_(y),
        lambda: c().zero_(), lambda: c().fill_(1.0), lambda: c().uniform_(), lambda: c().normal_(),
        # torch.nn.functional (rms_norm: one of tbprobe's EXTRAS)
        lambda: F.relu(x), lambda: F.gelu(x), lambda: F.silu(x), lambda: F.softmax(x, -1),
        lambda: F.layer_norm(x, (4,)), lambda: F.dropout(x, 0.0), lambda: F.linear(x, y),
        lambda: F.conv2d(conv_in, conv_w), lambda: F.rms_norm(x, (4,)),
        # written in Python without handing themselves to torch's dispatch: F.sigmoid is `input.sigmoid()`
        lambda: F.sigmoid(x), lambda: F.tanh(x), lambda: F.upsample(conv_in, scale_factor=2),
        lambda: F.upsample_nearest(conv_in, scale_factor=2), lambda: F.upsample_bilinear(conv_in, scale_factor=2),
        # Python's protocol, whose bodies call operators: `0 in x` compares and reduces, reversed(x) flips
        lambda: 0.5 in x, lambda: reversed(x),
        # shape and layout
        lambda: x[0], lambda: x[:, 1], lambda: x.view_as(y), lambda: x.stride(), lambda: x.t(), lambda: c().t_(),
        lambda: x.reshape(16), lambda: x.reshape_as(y), lambda: x.view(16, 1).squeeze(),
        lambda: c().unsqueeze_(0).squeeze_(0), lambda: x.unsqueeze(0), lambda: x.transpose(0, 1),
        lambda: c().transpose_(0, 1), lambda: x.permute(1, 0), lambda: x[:1].expand(4, 4), lambda: x.expand_as(y),
        lambda: x.split(2), lambda: x.split_with_sizes([2, 2]), lambda: x.tensor_split(2), lambda: x.chunk(2),
        lambda: torch.cat([x, y]), lambda: torch.concat([x, y]), lambda: torch.concatenate([x, y]),
        lambda: torch.stack([x, y]), lambda: torch.hstack([x, y]), lambda: torch.vstack([x, y]),
        lambda: torch.dstack([x, y]), lambda: x.flatten(), lambda: torch.flatten(x), lambda: x.unflatten(0, (2, 2)),
        lambda: x.narrow(0, 0, 2), lambda: x.select(0, 1), lambda: x.movedim(0, 1), lambda: x.moveaxis(0, 1),
        lambda: x.swapaxes(0, 1), lambda: x.swapdims(0, 1), lambda: x.repeat(2, 1), lambda: x.tile(2),
        lambda: x.repeat_interleave(2, dim=0), lambda: torch.repeat_interleave(x, 2), lambda: x.hsplit(2),
        lambda: x.vsplit(2), lambda: x.view(2, 2, 4).dsplit(2), lambda: x.unsafe_chunk(2),
        lambda: x.unsafe_split(2), lambda: x.unsafe_split_with_sizes([2, 2]), lambda: torch.column_stack([x, y]),
        lambda: torch.row_stack([x, y]), lambda: x.cfloat(),
        lambda: x.unbind(), lambda: x.flip(0), lambda: x.roll(1), lambda: x.unfold(0, 2, 1),
        lambda: x.index_select(0, idx), lambda: x.masked_select(b), lambda: x.ravel(), lambda: x.broadcast_to((4, 4)),
        lambda: torch.atleast_1d(x), lambda: torch.atleast_2d(x), lambda: torch.atleast_3d(x),
        lambda: torch.view_as_real(torch.complex(x, y)),
        # conversions, and leaving torch
        lambda: x.to(torch.float64), lambda: x.float(), lambda: x.half(), lambda: x.bfloat16(), lambda: x.double(),
        lambda: x.int(), lambda: x.long(), lambda: x.short(), lambda: x.bool(), lambda: x.byte(), lambda: x.char(),
        lambda: x.type_as(y), lambda: x.numpy(), lambda: x.tolist(), lambda: bool(b.any()), lambda: x.contiguous(),
        lambda: x.detach(), lambda: x.size(), lambda: x.dim(), lambda: x.numel(),
        # constructors
        lambda: torch.empty(2), lambda: torch.empty_like(x), lambda: torch.zeros(2), lambda: torch.zeros_like(x),
        lambda: torch.ones(2), lambda: torch.ones_like(x), lambda: torch.full((2,), 1.0), lambda: torch.full_like(x, 2.0),
        lambda: torch.arange(3), lambda: torch.eye(2), lambda: torch.linspace(0, 1, 3), lambda: torch.logspace(0, 1, 3),
        lambda: torch.rand(2), lambda: torch.rand_like(x), lambda: torch.randn(2), lambda: torch.randn_like(x),
        lambda: torch.randint(0, 5, (2,)), lambda: torch.randint_like(x, 5), lambda: torch.randperm(3),
        lambda: torch.tensor([1.0]), lambda: torch.as_tensor([1.0]), lambda: torch.from_numpy(np.ones(2)),
        lambda: x.new_empty(2), lambda: x.new_zeros(2), lambda: x.new_ones(2), lambda: x.new_full((2,), 1.0),
        lambda: x.new_tensor([1.0]), lambda: torch.empty_strided((2,), (1,)), lambda: x.new_empty_strided((2,), (1,)),
        lambda: torch.scalar_tensor(1.0),
        # triangular and diagonal helpers, clamps and clones
        lambda: x.tril(), lambda: x.triu(), lambda: torch.tril(x), lambda: c().tril_(), lambda: c().triu_(),
        lambda: x.diag(), lambda: torch.diag(x), lambda: x.diagonal(), lambda: torch.diag_embed(x), lambda: x.diagflat(),
        lambda: torch.tril_indices(3, 3), lambda: torch.triu_indices(3, 3), lambda: x.clamp(0, 1),
        lambda: torch.clamp(x, 0, 1), lambda: c().clamp_(0, 1), lambda: x.clamp_min(0), lambda: x.clamp_max(0),
        lambda: c().clamp_min_(0), lambda: c().clamp_max_(0), lambda: x.clip(0, 1), lambda: c().clip_(0, 1),
        lambda: torch.clone(x),
    ]


def _augmented(z, y):
    z += y
    z -= y
    z *= y
    z /= y
    z //= y
    z %= y
    z **= 2
    z @= y
    return z


def _setitem(z, y):
    z[0] = 1.0
    z[1, 1] = y[0, 0]


def _training(x):
    """A model step with the optimizer and clipping a training loop has: foreach AdamW, clip_grad_norm_."""
    w = torch.nn.Parameter(x.clone())
    opt = torch.optim.AdamW([w], lr=0.1, foreach=True)
    (w * 2).sum().backward()
    torch.nn.utils.clip_grad_norm_([w], 1.0)
    opt.step()
    opt.zero_grad()


def main() -> None:
    tool, risk, dump_path = sys.argv[1:4]
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    cfg = {"task": "statistics", "dump_path": dump_path, "rank": [], "step": [], "level": "L1",
           "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    if risk != "default":
        cfg["risk_level"] = risk
    os.makedirs(dump_path, exist_ok=True)
    cfg_path = os.path.join(dump_path, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        sys.path.insert(0, os.path.join(HERE, "..", ".."))
        from tbprobe import PrecisionDebugger
    debugger = PrecisionDebugger(config_path=cfg_path)
    torch.manual_seed(0)
    x, y = torch.randn(4, 4) + 3, torch.randn(4, 4) + 3
    i = torch.arange(16).view(4, 4) + 1
    calls = _calls(x, y, i, x > 3, torch.tensor([0, 2]))
    debugger.start()
    for call in calls:
        try:
            call()
        except Exception:   # (a call this torch refuses is refused under both tools)
            pass
    _training(x)
    debugger.stop()
    debugger.step()
    names = []
    for root, _, files in os.walk(dump_path):
        if "dump.json" in files:
            with open(os.path.join(root, "dump.json")) as f:
                names += [k for k in json.load(f)["data"] if k.endswith(".forward")]
    print(json.dumps(names))


if __name__ == "__main__":
    main()
