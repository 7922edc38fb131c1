"""transformers' own models, called the way users call them (labels in, the loss computed inside), under bf16
autocast: the collector records every step without an error and the graph builder compares
step 0 with step 1. transformers builds its attention masks under torch.vmap, which once switched the collector
off after the first step; these models are where such a break shows first. Needs the pinned transformers
(scripts/hf_deps.sh; make test installs it); skipped without it."""
import os
import sys

import pytest
import torch
from conftest import load_rank, make_debugger, rank_dirs

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import train_hf  # noqa: E402
from train_gpt import make_batch  # noqa: E402

from tbprobe.errors import TbprobeError  # noqa: E402
from tbprobe.graph_builder import run_graph  # noqa: E402

pytestmark = pytest.mark.skipif(not train_hf.have_transformers(),
                                reason=f"transformers is not installed under {train_hf.HF_PATH} "
                                       "(bash scripts/hf_deps.sh; make test does it)")


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("arch", train_hf.ARCHS)
def test_a_transformers_model_under_autocast_records_every_step(tmp_path, arch, level):
    torch.manual_seed(0)
    model = train_hf.HFCausalLM(arch).model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dbg = make_debugger(tmp_path, level=level, steps=2)
    for step in range(2):
        x, _ = make_batch(step, 2, 16, 64)
        dbg.start(model=model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            # at L0 the cache as configured (a DynamicCache among the outputs, the mask left to is_causal); at mix
            # without it, as training scripts set it, where the mask is built under vmap
            out = model(input_ids=x, labels=x) if level == "L0" else model(input_ids=x, labels=x, use_cache=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0, dict(dbg.guard.counts)
    dump = str(tmp_path / "dump")
    data = [load_rank(rank_dirs(dump, step)[0])["dump"]["data"] for step in (0, 1)]
    assert set(data[0]) == set(data[1]) and len(data[0]) > 30
    bf16 = [n for n, e in data[1].items() if any(isinstance(a, dict) and a.get("dtype") == "torch.bfloat16"
                                                 for a in e.get("output") or [])]
    assert bf16, "autocast's bfloat16 outputs are missing"
    if level == "mix":
        assert any(isinstance(a, dict) and a.get("type") == "BatchedTensor"
                   for e in data[1].values() for a in e.get("output") or [])
    result = run_graph(rank_dirs(dump, 0)[0], rank_dirs(dump, 1)[0], str(tmp_path / "graph"), parallel=False,
                       progress=False)
    s = result.summary
    assert s["unmatched"] == 0 and s["matched"] >= s["nodes"] - 1


def _train_with_trainer(tmp_path, callbacks, name):
    """Two optimizer steps of transformers' Trainer on the Llama, each of two micro-batches of two sequences."""
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (scripts/hf_deps.sh)")
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = train_hf.HFCausalLM("llama").model
    data = [{"input_ids": x[0], "labels": x[0]} for x in (make_batch(i, 1, 16, 64) for i in range(8))]
    args = TrainingArguments(output_dir=str(tmp_path / name), max_steps=2, per_device_train_batch_size=2,
                             gradient_accumulation_steps=2, learning_rate=1e-3, max_grad_norm=1.0, seed=0,
                             use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                             dataloader_num_workers=0, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks).train()
    return model


def test_the_trainer_callback_collects_each_optimizer_step_and_leaves_the_weights_alone(tmp_path):
    dbg = make_debugger(tmp_path, level="mix", steps=2)
    collected = _train_with_trainer(tmp_path, [dbg.trainer_callback()], "with")
    dbg.close()
    plain = _train_with_trainer(tmp_path, [], "without")
    assert dbg.hook_errors == 0, dict(dbg.guard.counts)
    for (name, a), (_, b) in zip(collected.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(a, b), name
    dump = str(tmp_path / "dump")
    assert sorted(os.listdir(dump)) == ["step0", "step1"]
    for step in (0, 1):
        data = load_rank(rank_dirs(dump, step)[0])["dump"]["data"]
        # both micro-batches in the step, the optimizer's step after them
        assert {"Module.model.LlamaModel.forward.0", "Module.model.LlamaModel.forward.1"} <= set(data)
        assert "Module.model.LlamaModel.forward.2" not in data
        assert any(n.startswith("Module.model.layers.0.mlp.down_proj.Linear.parameters_grad") for n in data)
        assert any(n.startswith("Torch._foreach_norm") for n in data)   # the clipping


def test_the_trainer_callback_needs_transformers(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name == "transformers":
            raise ImportError("No module named 'transformers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    dbg = make_debugger(tmp_path, level="L0", steps=1)
    with pytest.raises(TbprobeError, match="trainer_callback\\(\\) needs transformers"):
        dbg.trainer_callback()
