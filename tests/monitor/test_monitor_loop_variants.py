"""The training monitor on the loops real users write (tests/monitor/loop_variants.py): LBFGS with a closure,
autocast with a GradScaler that skips a step, gradient accumulation, foreach/fused AdamW and SGD with momentum
under clip_grad_norm_, an EMA copy, a frozen teacher, layers unfrozen mid-run, torch.func, a sparse embedding
with SparseAdam, add_param_group and a replaced submodule.

For each: training bitwise the same as without the monitor, no failure and no warning, event files TensorBoard
reads and `tbprobe monitor export-csv` exports, and every weight statistic equal to the one computed from the
model by the test's own optimizer hooks at the same step (and every module output norm to the test's forward
hook's); against msprobe's monitor, the same names per metric where both record the same thing.
"""
import csv
import glob
import json
import logging
import os
import subprocess
import warnings
from collections import defaultdict

import pytest
import torch

from tbprobe.cli import main as cli_main
from tbprobe.monitor import TrainerMon
from tests.monitor import loop_variants as lv
from tests.monitor.helpers import read_scalars, write_config

STEPS = 4
ALL_OPS = ["min", "max", "mean", "norm", "zeros", "nans"]
CFG = dict(targets={}, xy_distribution=True, wg_distribution=True, mv_distribution=True, param_distribution=True,
           ops=ALL_OPS)
PEER_PY = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "python")
HERE = os.path.dirname(os.path.abspath(__file__))


def _dense(t):
    return t.to_dense() if t.layout != torch.strided else t


def _norm(t):
    return _dense(t).detach().double().norm().item()


class Truth:
    """What the monitor should write, taken by the test's own hooks: per monitor step (the optimizer's step
    count), per parameter that requires a gradient then, its gradient (before the step, or after it for a step
    given a closure, which computes it), weight before and after, Adam's moments before; and the last training
    forward's output norm of every module (per micro step with accumulation)."""

    def __init__(self, model, opt, grad_acc):
        self.model, self.grad_acc, self.step = model, grad_acc, 0
        self.values = defaultdict(dict)   # tag -> {step: value}
        self.calls = defaultdict(int)     # module name -> training calls this step
        opt.register_step_pre_hook(self.pre)
        opt.register_step_post_hook(self.post)
        self._hooked = set()
        self._hook_modules()
        model.register_forward_pre_hook(lambda m, a: self._hook_modules())   # (a submodule put in since)

    def _hook_modules(self):
        for name, mod in self.model.named_modules():
            if name and id(mod) not in self._hooked:
                self._hooked.add(id(mod))
                mod.register_forward_hook(lambda m, a, out, name=name: self.forward(name, m, out))

    def forward(self, name, mod, out):
        if (not mod.training or torch._C._functorch.maybe_current_level() is not None
                or not isinstance(out, torch.Tensor) or torch._C._current_graph_task_id() != -1):
            return
        if dict(self.model.named_modules()).get(name) is not mod:
            return   # (a module no longer in the model)
        micro = self.calls[name] % self.grad_acc
        self.calls[name] += 1
        node = f"{name}:micro{micro}" if self.grad_acc > 1 else name
        self.values[f"{node}/output_norm"][self.step] = _norm(out)

    def _params(self):
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def pre(self, opt, args, kwargs):
        self.closure = len(args) > 1 or "closure" in kwargs
        for n, p in self._params():
            if p.grad is not None and not self.closure:
                self.values[f"{n}/grad_norm"][self.step] = _norm(p.grad)
            self.values[f"{n}/param_norm"][self.step] = _norm(p)
            for key in ("exp_avg", "exp_avg_sq"):
                if key in opt.state.get(p, {}):
                    self.values[f"{n}/{key}_norm"][self.step] = _norm(opt.state[p][key])

    def post(self, opt, args, kwargs):
        for n, p in self._params():
            if p.grad is not None and self.closure:
                self.values[f"{n}/grad_norm"][self.step] = _norm(p.grad)
            self.values[f"{n}/param_updated_norm"][self.step] = _norm(p)
        self.step += 1
        self.calls.clear()


def _run(tmp_path, loop, **cfg):
    tmp_path.mkdir(parents=True, exist_ok=True)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", **{**CFG, **cfg}))
    truth = []

    def attach(model, opt, grad_acc):
        mon.set_monitor(model, opt, grad_acc_steps=grad_acc)
        truth.append(Truth(model, opt, grad_acc))
    result = lv.LOOPS[loop](attach, STEPS)
    mon.close()
    return mon, result, truth[0], str(tmp_path / "out" / "rank0")


@pytest.mark.parametrize("loop", sorted(lv.LOOPS))
def test_loop_variant(tmp_path, loop, caplog):
    base_model, _, base_losses = lv.LOOPS[loop](None, STEPS)
    caplog.set_level(logging.WARNING, logger="tbprobe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (no warning from the monitor, nor one its hooks cause)
        mon, (model, _, losses), truth, run = _run(tmp_path, loop)
    assert mon.errors == 0
    assert [r.getMessage() for r in caplog.records if r.name.startswith("tbprobe")] == []
    # bitwise the same training
    assert len(losses) == len(base_losses)
    assert all(torch.equal(a, b) for a, b in zip(losses, base_losses))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), base_model.state_dict().values()))
    s = read_scalars(run)   # (TensorBoard's own reader)
    # every statistic the test computed is written, at the same steps, with the same value
    for tag, want in truth.values.items():
        assert tag in s, tag
        assert set(s[tag]) == set(want), tag
        for step, v in want.items():
            assert s[tag][step] == pytest.approx(v, rel=2e-5, abs=1e-12), (tag, step)
    # and nothing of a weight at a step the test saw none of (a frozen one, a replaced one)
    for tag, got in s.items():
        if tag.rsplit("/", 1)[-1] in ("grad_norm", "param_norm", "param_updated_norm", "exp_avg_norm"):
            assert set(got) == set(truth.values.get(tag, {})), tag
    out = tmp_path / "csv"
    assert cli_main(["monitor", "export-csv", str(tmp_path / "out"), "-o", str(out)]) == 0
    assert glob.glob(str(out / "*-rank0-tbprobe" / "param_origin_0-*.csv"))


def test_lbfgs_gradients_are_those_of_their_own_step(tmp_path):
    """A step given a closure computes its gradients inside it: read before the step, step 0 had none and each
    later step showed the one before's (as msprobe still does)."""
    _, _, truth, run = _run(tmp_path, "lbfgs")
    s = read_scalars(run)
    assert set(s["fc1.weight/grad_norm"]) == {0, 1, 2, 3}
    assert s["fc1.weight/grad_norm"][0] == pytest.approx(truth.values["fc1.weight/grad_norm"][0], rel=1e-5)


def test_sparse_gradient_statistics_are_the_dense_ones(tmp_path):
    """An nn.Embedding(sparse=True) gradient: every statistic as of the dense gradient (aminmax and the norm
    kernels have no sparse version: the whole optimizer pre-step failed, no gradient, weight or moment of any
    parameter was written)."""
    grads = {}
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", **CFG))

    def attach(model, opt, grad_acc):
        mon.set_monitor(model, opt)
        opt.register_step_pre_hook(lambda o, a, k: grads.update({len(grads): model.emb.weight.grad.to_dense()}))
    lv.sparse(attach, 2)
    mon.close()
    assert mon.errors == 0
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    for step, g in grads.items():
        want = {"min": g.min(), "max": g.max(), "mean": g.mean(), "norm": g.norm(),
                "zeros": (g.abs() < 1e-8).float().mean(), "nans": torch.isnan(g).sum().float()}
        for op, v in want.items():
            assert s[f"emb.weight/grad_{op}"][step] == pytest.approx(v.item(), rel=1e-5, abs=1e-9), op
    assert set(s["head.weight/param_norm"]) == {0, 1}


def test_sparse_gradient_norm_only_config(tmp_path):
    """The default statistics (norm alone) go through the fused norm kernel, which has no sparse version either."""
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", wg_distribution=True))
    grads = []

    def attach(model, opt, grad_acc):
        mon.set_monitor(model, opt)
        opt.register_step_pre_hook(lambda o, a, k: grads.append(_norm(model.emb.weight.grad)))
    lv.sparse(attach, 2)
    mon.close()
    assert mon.errors == 0
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    assert [s["emb.weight/grad_norm"][i] for i in (0, 1)] == pytest.approx(grads, rel=1e-6)


def test_torch_func_transforms_are_not_recorded(tmp_path):
    """Forwards under vmap(grad(...)) (per-sample gradients) run on the transform's wrapped tensors: the forward
    hook's statistics raised there (a .item() under vmap), once per module and step."""
    mon, _, truth, run = _run(tmp_path, "func")
    assert mon.errors == 0
    s = read_scalars(run)
    assert s["fc2/output_norm"] == pytest.approx(truth.values["fc2/output_norm"], rel=1e-5)


def test_unfrozen_layers_are_recorded_from_then_on(tmp_path):
    """Parameters frozen at set_monitor were left out of the selection for good: a fine-tuning schedule that
    unfreezes them later had none of their statistics."""
    _, _, _, run = _run(tmp_path, "unfreeze")
    s = read_scalars(run)
    for metric in ("grad", "param", "param_updated", "exp_avg"):
        assert set(s[f"fc1.weight/{metric}_norm"]) == ({3} if metric == "exp_avg" else {2, 3}), metric
    assert set(s["fc2.weight/grad_norm"]) == {0, 1, 2, 3}


def test_replaced_submodule_is_followed(tmp_path):
    """model.fc2 replaced at step 2: the monitor kept the old module's hooks and its parameters under fc2's names,
    so fc2.weight/param was the old weight (frozen from then on) and fc2's activations stopped."""
    _, (model, opt, _), truth, run = _run(tmp_path, "replace")
    s = read_scalars(run)
    assert set(s["fc2/output_norm"]) == {0, 1, 2, 3}
    assert s["fc2.weight/param_updated_norm"][3] == pytest.approx(_norm(model.fc2.weight), rel=1e-6)
    assert set(s["fc2.weight/exp_avg_norm"]) == {1, 3}   # (the new weight has no moment before its first step)


def _norms(root, metric):
    """{(name without msprobe's chunk prefix, step): norm} of one metric's CSV files."""
    out = {}
    for path in glob.glob(os.path.join(root, f"{metric}_[0-9]*.csv")):
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            for r in reader:
                out[(r[1].split(":", 1)[-1], int(r[2]))] = float(r[header.index("norm")])
    return out


def _names_by_metric(root):
    """{csv metric: {name}} of a monitor CSV folder (msprobe's, or tbprobe's export), without rows of nothing but
    nan (msprobe's input gradient of an input that needs none, which tbprobe does not write: documented)."""
    out = defaultdict(set)
    for path in glob.glob(os.path.join(root, "*.csv")):
        metric = os.path.basename(path).rsplit("_", 1)[0]
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            cols = [header.index(op) for op in ALL_OPS]
            out[metric].update(r[1] for r in reader if not all(r[c] == "nan" for c in cols))
    return out


# Loops msprobe's monitor runs (under torch.func it raises: its full backward hooks' autograd Function has no
# setup_context), and what tbprobe records differently by design (docs/compatibility.md, Monitor): a root
# model's rows, integer inputs (an embedding's ids), grad_unreduced in a single process; with a closure and
# after a change of the model, msprobe's step labels and names are those it registered at set_monitor.
PEER_LOOPS = ["accum", "adamw-foreach", "adamw-fused", "distill", "ema", "scaler-fp16", "sgd-momentum", "sparse"]


@pytest.mark.peers
@pytest.mark.parametrize("loop", PEER_LOOPS)
def test_same_names_as_msprobe(tmp_path, loop):
    if not os.path.exists(PEER_PY):
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps({**CFG, "format": "csv"}))
    env = dict(os.environ, MONITOR_OUTPUT_DIR=str(tmp_path / "ms"))
    proc = subprocess.run([PEER_PY, os.path.join(HERE, "loop_variants.py"), "msprobe", loop, str(cfg_path),
                           str(STEPS)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ms_dir = glob.glob(str(tmp_path / "ms" / "*-rank0-*"))[0]
    ms = _names_by_metric(ms_dir)
    _run(tmp_path / "tb", loop)
    assert cli_main(["monitor", "export-csv", str(tmp_path / "tb" / "out"), "-o", str(tmp_path / "x")]) == 0
    tb_dir = glob.glob(str(tmp_path / "x" / "*-rank0-tbprobe"))[0]
    tb = _names_by_metric(tb_dir)
    # the weights' numbers too, at the same steps (msprobe writes 6 decimal places)
    for metric in ("grad_reduced", "param_origin", "param_updated", "exp_avg"):
        want, got = _norms(ms_dir, metric), _norms(tb_dir, metric)
        assert set(want) == set(got), metric
        for key, v in want.items():
            assert got[key] == pytest.approx(v, rel=1e-4, abs=2e-6), (metric, key)
    ms.pop("grad_unreduced", None)
    for metric in set(ms) | set(tb):
        strip = {n.split(":", 1)[-1] for n in ms.get(metric, ())}   # (msprobe's "0:" chunk prefix on weights)
        strip = {n for n in strip if not n.startswith(".") and n not in ("input", "output")}   # (the root model)
        assert _comparable(loop, strip) == _comparable(loop, tb.get(metric, set())), metric


def _comparable(loop, names):
    if loop in ("scaler-fp16", "sparse"):   # (an embedding's integer ids: msprobe writes emb.input)
        names = {n for n in names if n != "emb.input"}
    return names
