"""Train HuggingFace transformers' LlamaForCausalLM, at a toy size, with tbprobe's collector switched on.

    bash scripts/hf_deps.sh          # a pinned transformers into .deps/hf (tbprobe itself does not need it)
    python examples/train_hf_llama.py --dump-path out/hf_llama --level mix --steps 2

The model is transformers' own code (attention masks, position ids, rotary embeddings, grouped-query attention,
output objects), trained with AdamW and gradient clipping like train_llama.py, so the dump shows what a user's
HuggingFace run records. `--tool msprobe` runs the same loop under the reference collector, `--tool none` with no
tool. The tests compare both tools' dumps of it and bench/collector_overhead.py times it ("small-hf-llama").
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
from train_gpt import common_args, seed_run, train

__all__ = ["HF_PATH", "HFLlama", "have_transformers", "main"]

HF_PATH = os.environ.get("TBPROBE_HF_PATH",
                         os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".deps", "hf"))


def have_transformers() -> bool:
    """Whether transformers imports, from this interpreter's packages or from HF_PATH (scripts/hf_deps.sh)."""
    if HF_PATH not in sys.path:
        sys.path.append(HF_PATH)   # appended: the interpreter's own numpy, torch and the rest come first
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


class HFLlama(nn.Module):
    """LlamaForCausalLM called for its logits, as the other examples' models are (tokens in, logits out)."""

    def __init__(self, vocab: int = 64, dim: int = 32, layers: int = 2, ctx: int = 16):
        super().__init__()
        if not have_transformers():
            raise SystemExit(f"transformers is not installed (bash scripts/hf_deps.sh puts it under {HF_PATH})")
        import transformers

        transformers.logging.set_verbosity_error()
        cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=2 * dim,
                                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=ctx, attn_implementation="sdpa")
        self.model = transformers.LlamaForCausalLM(cfg)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=idx, use_cache=False).logits


def main(argv=None) -> list:
    args = common_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    seed_run(args)
    model = HFLlama()
    return train(model, torch.optim.AdamW(model.parameters(), lr=1e-3), args, clip_norm=1.0)


if __name__ == "__main__":
    main()
