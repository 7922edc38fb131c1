"""Train a HuggingFace transformers causal LM (Llama, Qwen2, Mixtral or GPT-2), at a toy size, with tbprobe on.

    bash scripts/hf_deps.sh          # a pinned transformers into .deps/hf (tbprobe itself does not need it)
    python examples/train_hf.py --arch llama --dump-path out/hf_llama --level mix --steps 2

The model is transformers' own code (attention masks built under torch.vmap, position ids, rotary embeddings,
grouped-query attention, output objects; Mixtral's top-2 routing over 4 experts), trained with AdamW and gradient
clipping like train_llama.py, so the dump shows what a user's HuggingFace run records. `--tool msprobe` runs the same
loop under the reference collector, `--tool none` with no tool. The tests compare both tools' dumps of the Llama,
GPT-2 and Mixtral; bench/collector_overhead.py times the Llama, Qwen2 and GPT-2 ("small-hf-<arch>").
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
from train_gpt import common_args, seed_run, train

__all__ = ["ARCHS", "HF_PATH", "HFCausalLM", "have_transformers", "main"]

HF_PATH = os.environ.get("TBPROBE_HF_PATH",
                         os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".deps", "hf"))
ARCHS = ("llama", "qwen2", "mixtral", "gpt2")


def have_transformers() -> bool:
    """Whether transformers imports, from this interpreter's packages or from HF_PATH (scripts/hf_deps.sh)."""
    if HF_PATH not in sys.path:
        sys.path.append(HF_PATH)   # appended: the interpreter's own numpy, torch and the rest come first
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def _config(transformers, arch: str, vocab: int, dim: int, layers: int, ctx: int):
    if arch == "gpt2":   # dropout off, as in the other examples' benchmarked models
        return transformers.GPT2Config(vocab_size=vocab, n_embd=dim, n_layer=layers, n_head=4, n_positions=ctx,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa")
    config, extra = {"qwen2": (transformers.Qwen2Config, {}), "llama": (transformers.LlamaConfig, {}),
                     "mixtral": (transformers.MixtralConfig, {"num_local_experts": 4, "num_experts_per_tok": 2})}[arch]
    return config(**extra, vocab_size=vocab, hidden_size=dim, intermediate_size=2 * dim, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ctx,
                  attn_implementation="sdpa")


class HFCausalLM(nn.Module):
    """transformers' causal LM of `arch` called for its logits, as the other examples' models are (tokens in,
    logits out); its modules are named `model.<transformers' names>`."""

    def __init__(self, arch: str = "llama", vocab: int = 64, dim: int = 32, layers: int = 2, ctx: int = 16):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"arch must be one of {', '.join(ARCHS)}, not {arch!r}")
        if not have_transformers():
            raise SystemExit(f"transformers is not installed (bash scripts/hf_deps.sh puts it under {HF_PATH})")
        import transformers

        transformers.logging.set_verbosity_error()
        self.model = transformers.AutoModelForCausalLM.from_config(
            _config(transformers, arch, vocab, dim, layers, ctx))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=idx, use_cache=False).logits


def main(argv=None) -> list:
    p = common_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--arch", default="llama", choices=ARCHS)
    args = p.parse_args(argv)
    seed_run(args)
    model = HFCausalLM(args.arch)
    return train(model, torch.optim.AdamW(model.parameters(), lr=1e-3), args, clip_norm=1.0)


if __name__ == "__main__":
    main()
