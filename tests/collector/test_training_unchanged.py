"""The collector never hurts the training run: the losses and weights of a collected run are bitwise those of the
plain run (small models and transformers' Llama at every level, and operators that stress the capture under
bf16 autocast with a GradScaler), and the user's tensor subclasses and torch function modes see the user's calls
alone."""

import pytest
import torch
from conftest import make_debugger, rank_dirs
from run_model import train
from train_hf import HF_PATH, have_transformers


@pytest.mark.parametrize("model, level, mode", [("gpt_dropout", "mix", "statistics"), ("conv", "L0", "statistics"),
                                                ("mlp", "L1", "md5"), ("llama", "L0", "statistics"),
                                                ("llama", "mix", "statistics"), ("hf-llama", "L0", "statistics"),
                                                ("hf-llama", "mix", "md5")])
def test_losses_and_weights_bitwise_identical(tmp_path, model, level, mode):
    """The Llamas at L0 and mix: a module whose input has other consumers and which uses it twice (an RMSNorm on
    the residual stream) must not change the order in which that input's gradient is summed, as the module views of an
    earlier design did, changing the last bits of the weights."""
    if model.startswith("hf-") and not have_transformers():
        pytest.skip(f"transformers is not installed under {HF_PATH} (bash scripts/hf_deps.sh)")
    torch.manual_seed(7)
    plain_model, plain_losses = train(None, model, steps=3)
    dbg = make_debugger(tmp_path, level=level, steps=3, summary_mode=mode)
    torch.manual_seed(7)
    probed_model, probed_losses = train(dbg, model, steps=3)
    dbg.close()
    assert len(rank_dirs(str(tmp_path / "dump"), 2)) == 1        # it did collect
    for a, b in zip(plain_losses, probed_losses):
        assert torch.equal(a, b)
    for (n, p), (_, q) in zip(plain_model.state_dict().items(), probed_model.state_dict().items()):
        assert torch.equal(p, q), n


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_the_users_subclasses_and_function_modes_see_only_the_users_calls(tmp_path, level):
    """At L1 and mix tbprobe's own torch calls (statistics, property reads, the step's read-back) went through the
    user's tensor subclass's __torch_function__ (86 calls where the user's code made 2) and through a
    TorchFunctionMode the user entered before start() (123 -> 420); they run with torch functions disabled now."""
    import collections

    from torch.overrides import TorchFunctionMode

    from tbprobe import PrecisionDebugger

    seen = collections.Counter()

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen[getattr(func, "__name__", repr(func))] += 1
            return super().__torch_function__(func, types, args, kwargs or {})

    class Counting(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls[getattr(func, "__name__", repr(func))] += 1
            return func(*args, **(kwargs or {}))

    def run(dbg):
        seen.clear()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 1))
        mode = Counting()
        with mode:
            if dbg:
                dbg.start(model=model)
            x = torch.ones(3, 4).as_subclass(Logged)
            (model(x) * 2).sum().backward()
            if dbg:
                dbg.stop()
                dbg.step()
        return dict(seen), dict(mode.calls)

    plain = run(None)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level=level)
    collected = run(dbg)
    dbg.close()
    assert dbg.hook_errors == 0
    assert collected == plain
    assert plain[0] and plain[1]


class _HardPatterns(torch.nn.Module):
    """Operators that stress the capture: einsum, in-place on a view, index_put with accumulate, where, scatter_add_,
    masked SDPA, EmbeddingBag with offsets, complex views."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 6))
        self.emb = torch.nn.EmbeddingBag(10, 6, mode="mean")
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x, idx):
        h = torch.einsum("bi,ij->bj", x, self.w)
        h = h.clone()
        h[:, 0] += 1.0
        h = h.index_put((torch.tensor([0, 1]),), torch.ones(2, 6, dtype=h.dtype), accumulate=True)
        h = torch.where(h > 0, h, 0.1 * h)
        g = torch.zeros(3, 6, dtype=h.dtype).scatter_add_(0, torch.tensor([[0, 1, 2, 0, 1, 2]] * 2), h[:2])
        q = self.lin(h).view(1, 1, -1, 6)
        mask = torch.tril(torch.ones(q.shape[2], q.shape[2], dtype=torch.bool))
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).view(-1, 6)
        e = self.emb(idx, offsets=torch.tensor([0, 2]))
        c = torch.view_as_complex(torch.stack([a, a * 0.5], -1)).abs()
        return a.sum() + g.sum() + e.sum() + c.sum() + torch.linalg.norm(h, ord="fro")


def _train_hard(dbg, steps=2):
    """bf16 autocast with a GradScaler (unscale_ changes the gradients in place), gradient clipping and AdamW."""
    torch.manual_seed(0)
    model = _HardPatterns()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    losses = []
    for _ in range(steps):
        x, idx = torch.randn(4, 6), torch.tensor([1, 2, 3, 4])
        if dbg is not None:
            dbg.start(model=model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x, idx).float()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if dbg is not None:
            dbg.stop()
            dbg.step()
        losses.append(loss.detach())
    return losses + [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_hard_training_patterns_stay_bitwise_identical(tmp_path, level):
    plain = _train_hard(None)
    dbg = make_debugger(tmp_path, level=level, steps=2)
    probed = _train_hard(dbg)
    dbg.close()
    assert dbg.hook_errors == 0, dict(dbg.guard.counts)
    assert len(rank_dirs(str(tmp_path / "dump"), 1)) == 1        # it did collect
    assert all(torch.equal(a, b) for a, b in zip(plain, probed))
