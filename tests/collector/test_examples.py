"""The example scripts run as a user would run them, and the demo's debug/bench pair really diverges."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import pytest  # noqa: E402
import train_gpt  # noqa: E402
import train_hf  # noqa: E402
import train_llama  # noqa: E402
import train_mlp  # noqa: E402
from conftest import load_rank, rank_dirs  # noqa: E402


def test_train_gpt_debug_and_bench_runs(tmp_path):
    bench = train_gpt.main(["--dump-path", str(tmp_path / "bench"), "--level", "mix", "--steps", "2"])
    debug = train_gpt.main(["--dump-path", str(tmp_path / "debug"), "--level", "mix", "--steps", "2",
                            "--perturb", "0.05"])
    again = train_gpt.main(["--dump-path", str(tmp_path / "again"), "--level", "mix", "--steps", "2"])
    assert bench == again                 # seeded: repeatable
    assert debug[0] != bench[0]           # the perturbed weight changes the first loss
    for run in ("bench", "debug"):
        for step in (0, 1):
            r = load_rank(rank_dirs(str(tmp_path / run), step)[0])
            assert "Functional.scaled_dot_product_attention.0.forward" in r["dump"]["data"]
            assert "Module.blocks.1.mlp.fc.Linear.forward.0" in r["construct"]
    w_bench = load_rank(rank_dirs(str(tmp_path / "bench"))[0])["dump"]["data"][
        "Module.blocks.1.mlp.fc.Linear.forward.0"]["parameters"]["weight"]
    w_debug = load_rank(rank_dirs(str(tmp_path / "debug"))[0])["dump"]["data"][
        "Module.blocks.1.mlp.fc.Linear.forward.0"]["parameters"]["weight"]
    assert abs(w_debug["Mean"] - w_bench["Mean"] - 0.05 / 32) < 1e-5     # column 0 of a [128, 32] weight


def test_train_mlp(tmp_path):
    losses = train_mlp.main(["--dump-path", str(tmp_path / "mlp"), "--steps", "2"])
    assert len(losses) == 2
    assert sorted(os.listdir(tmp_path / "mlp")) == ["step0", "step1"]


def test_train_llama_records_the_clipping_and_leaves_the_losses_alone(tmp_path):
    losses = train_llama.main(["--dump-path", str(tmp_path / "llama"), "--level", "mix", "--steps", "2"])
    plain = train_llama.main(["--tool", "none", "--steps", "2"])
    assert losses == plain and len(losses) == 2
    for step in (0, 1):
        r = load_rank(rank_dirs(str(tmp_path / "llama"), step)[0])
        assert r["construct"]["clip_grad"] is None and r["construct"]["Torch._foreach_norm.0.forward"] == "clip_grad"
        assert "Module.layers.1.self_attn.Attention.forward.0" in r["dump"]["data"]


def test_train_hf_llama_records_every_step_and_leaves_the_losses_alone(tmp_path):
    """transformers' own Llama at mix: its vmap-built attention mask once switched the collector off after the
    first step (only step0 was written); now every step is, with the mask's BatchedTensor items."""
    if not train_hf.have_transformers():
        pytest.skip(f"transformers is not installed under {train_hf.HF_PATH} (bash scripts/hf_deps.sh)")
    losses = train_hf.main(["--dump-path", str(tmp_path / "hf"), "--level", "mix", "--steps", "2"])
    plain = train_hf.main(["--tool", "none", "--steps", "2"])
    assert losses == plain and len(losses) == 2
    for step in (0, 1):
        data = load_rank(rank_dirs(str(tmp_path / "hf"), step)[0])["dump"]["data"]
        assert "Module.model.model.layers.1.self_attn.LlamaAttention.forward.0" in data
        batched = [n for n, e in data.items()
                   if any(isinstance(a, dict) and a.get("type") == "BatchedTensor" for a in e.get("output") or [])]
        assert batched, "no operator of the vmap-built mask was recorded"
