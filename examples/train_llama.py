"""Train a small Llama-style decoder on random tokens with tbprobe's collector switched on.

    python examples/train_llama.py --dump-path out/llama --level mix --steps 2

The model is built the way today's LLMs are (and HuggingFace's Llama, Qwen2 and Mistral code is laid out):
RMSNorm computed from plain operators, rotary position embeddings made once per forward and handed to every layer
as a keyword argument, grouped-query attention through scaled_dot_product_attention, a SwiGLU MLP, and modules
called with keyword arguments only. It trains with AdamW and clips the gradients' norm. Many operators per module,
unlike examples/train_gpt.py, whose modules mostly hold one operator each; tests and benchmarks use both.
`--tool msprobe` runs the same loop under the reference collector, `--tool none` with no tool.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from train_gpt import common_args, seed_run, train

__all__ = ["Llama", "main"]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in float32 whatever the input's dtype, as LLM code does, then back
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Rotary(nn.Module):
    """cos and sin of the rotary embedding for positions 0..T-1, made once per forward for all layers."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor):
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, hidden_states: torch.Tensor, position_embeddings) -> torch.Tensor:
        b, t, d = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, hidden_states: torch.Tensor, position_embeddings) -> torch.Tensor:
        h = hidden_states + self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                                           position_embeddings=position_embeddings)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, kv_heads: int = 2, layers: int = 2,
                 hidden: int = 64):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.rotary = Rotary(dim // heads)
        self.layers = nn.ModuleList([DecoderLayer(dim, heads, kv_heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(idx)
        pe = self.rotary(h, torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            h = layer(h, position_embeddings=pe)   # keyword arguments, as HuggingFace's layers are called
        return self.lm_head(self.norm(h))


def main(argv=None) -> list:
    args = common_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    seed_run(args)
    model = Llama()
    return train(model, torch.optim.AdamW(model.parameters(), lr=1e-3), args, clip_norm=1.0)


if __name__ == "__main__":
    main()
