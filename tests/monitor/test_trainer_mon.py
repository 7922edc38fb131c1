"""TrainerMon on real CPU training loops: what it records, when, and that the numbers are the real ones."""
import math
import os

import pytest
import torch

from tbprobe.errors import TbprobeError
from tbprobe.monitor import TrainerMon
from tests.monitor.helpers import Net, read_anomalies, read_scalars, train, write_config

ALL_OPS = ["min", "max", "mean", "norm", "zeros", "nans"]


def _run(tmp_path, steps=4, model=None, opt=None, grad_acc=1, train_kw=None, **cfg):
    torch.manual_seed(0)
    model = model or Net()
    opt = opt or torch.optim.Adam(model.parameters(), lr=1e-2)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", **cfg))
    mon.set_monitor(model, opt, grad_acc_steps=grad_acc)
    train(model, opt, steps, grad_acc=grad_acc, **(train_kw or {}))
    mon.close()
    return mon, model, opt, str(tmp_path / "out" / "rank0")


def test_records_every_distribution_with_true_values(tmp_path):
    mon, model, opt, run = _run(
        tmp_path, steps=3, targets={"layers.0": {}, "head": {}}, xy_distribution=True, wg_distribution=True,
        mv_distribution=True, param_distribution=True, ops=ALL_OPS, train_kw={"zero_last": False},
    )
    assert mon.errors == 0
    s = read_scalars(run)
    for tag in ["layers.0/input_norm", "layers.0/output_max", "head/input_grad_mean", "head/output_grad_norm",
                "layers.0/output_grad_zeros", "head.weight/grad_norm", "layers.0.fc.bias/grad_nans",
                "head.weight/param_norm", "head.weight/param_updated_norm", "head.weight/exp_avg_norm",
                "layers.0.fc.weight/exp_avg_sq_max"]:
        assert tag in s, tag
    assert set(s["head.weight/grad_norm"]) == {0, 1, 2}
    assert not any(t.startswith("layers.1") for t in s)  # not a target
    # The last step's numbers are the model's real ones (gradients kept after the last step).
    assert s["head.weight/grad_norm"][2] == pytest.approx(model.head.weight.grad.norm().item(), rel=1e-5)
    assert s["head.weight/grad_max"][2] == pytest.approx(model.head.weight.grad.max().item(), rel=1e-6)
    assert s["head.weight/param_updated_norm"][2] == pytest.approx(model.head.weight.norm().item(), rel=1e-5)
    # exp_avg is read before the step: undo Adam's update of step 2 (m = 0.9 m_prev + 0.1 g) to check it.
    g = model.head.weight.grad
    m_prev = (opt.state[model.head.weight]["exp_avg"] - 0.1 * g) / 0.9
    assert s["head.weight/exp_avg_norm"][2] == pytest.approx(m_prev.norm().item(), rel=1e-4)
    g1 = model.layers[0].fc.weight.grad
    assert s["layers.0.fc.weight/grad_zeros"][2] == pytest.approx((g1.abs() < 1e-8).float().mean().item())
    assert s["layers.0.fc.weight/grad_nans"][0] == 0.0


def test_activation_statistics_match_a_manual_forward(tmp_path):
    torch.manual_seed(1)
    model = Net()
    seen = {}
    model.layers[1].register_forward_hook(lambda m, a, out: seen.setdefault("out", out.detach().clone()))
    _, _, _, run = _run(tmp_path, steps=1, model=model, targets={"layers.1": {}}, xy_distribution=True,
                        ops=["mean", "norm"])
    s = read_scalars(run)
    assert s["layers.1/output_norm"][0] == pytest.approx(seen["out"].norm().item(), rel=1e-5)
    assert s["layers.1/output_mean"][0] == pytest.approx(seen["out"].mean().item(), rel=1e-5, abs=1e-7)
    assert "layers.1/output_min" not in s  # only the configured statistics


def test_step_schedule_start_interval_collect_times(tmp_path):
    mon, *_, run = _run(tmp_path, steps=12, wg_distribution=True, start_step=2, step_interval=3, collect_times=3)
    s = read_scalars(run)
    assert set(s["head.weight/grad_norm"]) == {2, 5, 8}
    assert not mon.monitoring  # hooks removed once collect_times is reached


def test_gradient_accumulation_micro_steps(tmp_path):
    _, _, _, run = _run(tmp_path, steps=2, grad_acc=3, targets={"layers.0": {}}, xy_distribution=True,
                        wg_distribution=True)
    s = read_scalars(run)
    for m in range(3):
        assert set(s[f"layers.0:micro{m}/output_norm"]) == {0, 1}
    assert "layers.0:micro3/output_norm" not in s
    assert set(s["layers.0.fc.weight/grad_norm"]) == {0, 1}


def test_nan_and_inf_are_recorded_and_reported(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"layers.0": {}}, xy_distribution=True,
                                  ops=["max", "norm", "nans"]))
    mon.set_monitor(model, opt)
    train(model, opt, 2)
    model.layers[0].poison = float("inf")
    train(model, opt, 1, seed=5)
    model.layers[0].poison = float("nan")
    train(model, opt, 1, seed=6)
    mon.close()
    assert mon.errors == 0 and mon._writer.errors == 0
    run = str(tmp_path / "out" / "rank0")
    s = read_scalars(run)
    assert math.isinf(s["layers.0/output_max"][2]) and math.isinf(s["layers.0/output_norm"][2])
    assert math.isnan(s["layers.0/output_norm"][3]) and s["layers.0/output_nans"][3] == 32.0
    assert s["layers.0/output_nans"][1] == 0.0
    found = {(a["step"], a["tag"]) for a in read_anomalies(run) if a["rule"] == "AnomalyNan"}
    assert (2, "layers.0/output_norm") in found and (3, "layers.0/output_norm") in found
    assert not any(step < 2 for step, _ in found)
    assert "anomaly/AnomalyNan/layers.0/output_norm" in s  # also an event, for TensorBoard's SCALARS tab


def test_spike_is_detected_by_moving_average_turbulence(tmp_path):
    _, _, _, run = _run(
        tmp_path, steps=20, targets={"layers.0": {}}, xy_distribution=True, ops=["max", "norm"],
        alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0}}]},
        train_kw={"scale": {14: 30.0}},
    )
    hits = [a for a in read_anomalies(run) if a["tag"] == "layers.0/input_norm"]
    assert [a["step"] for a in hits] == [14]
    assert hits[0]["rule"] == "AnomalyTurbulence" and hits[0]["value"] > 10 * hits[0]["history"]
    # max is not a turbulence statistic by default (as in the reference): no report for it
    assert not any(a["tag"].endswith("_max") for a in read_anomalies(run))


def test_turbulence_statistics_are_configurable(tmp_path):
    _, _, _, run = _run(
        tmp_path, steps=20, targets={"layers.0": {}}, xy_distribution=True, ops=["max", "mean", "norm"],
        alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0, "ops": ["max"]}}]},
        train_kw={"scale": {14: 30.0}},
    )
    found = read_anomalies(run)
    assert ("layers.0/input_max", 14) in {(a["tag"], a["step"]) for a in found}
    assert all(a["op"] == "max" for a in found)


def test_a_failing_statistic_never_reaches_training(tmp_path, monkeypatch):
    import tbprobe.monitor.hooks as hooks

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(hooks, "tensor_stats", broken)
    mon, model, _, run = _run(tmp_path, steps=2, xy_distribution=True, wg_distribution=True)
    assert mon.errors > 0
    assert "head.weight/grad_norm" in read_scalars(run)  # the optimizer-side statistics still arrive


def test_one_run_folder_per_rank_with_meta(tmp_path):
    import json

    _, _, _, run = _run(tmp_path, steps=1, targets={"head": {}}, xy_distribution=True)
    assert sorted(os.listdir(tmp_path / "out")) == ["rank0"]
    meta = json.loads((tmp_path / "out" / "rank0" / "monitor_meta.json").read_text())
    assert meta["shapes"]["head/output"] == [[4, 2], "torch.float32"]
    assert meta["ops"] == ["norm"]


def test_dynamic_on_off_through_the_config_file(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("DYNAMIC_MONITOR", "true")
    cfg_path = write_config(tmp_path, tmp_path / "out", wg_distribution=True, dynamic_on=False, collect_times=2)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(cfg_path)
    mon.set_monitor(model, opt)
    train(model, opt, 3)  # steps 0-2: off
    raw = json.load(open(cfg_path))
    raw["dynamic_on"] = True
    with open(cfg_path, "w") as f:
        json.dump(raw, f)
    os.utime(cfg_path, ns=(1, 10**18))  # a changed mtime even on coarse clocks
    train(model, opt, 5)  # steps 3-7: on from step 4, for collect_times=2 steps
    mon.close()
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    assert set(s["head.weight/grad_norm"]) == {4, 5}
    assert json.load(open(cfg_path))["dynamic_on"] is False  # switched back off for the next time


def test_a_dynamic_switch_on_records_from_the_next_step_whatever_start_step_says(tmp_path, monkeypatch):
    """As the reference ("dynamic start is not affected by start_step"): tbprobe waited start_step more steps."""
    import json

    monkeypatch.setenv("DYNAMIC_MONITOR", "true")
    cfg_path = write_config(tmp_path, tmp_path / "out", wg_distribution=True, dynamic_on=False, collect_times=3,
                            start_step=2, step_interval=2)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(cfg_path)
    mon.set_monitor(model, opt)
    train(model, opt, 3)  # steps 0-2: off; the change is seen as step 3 ends
    raw = json.load(open(cfg_path))
    raw["dynamic_on"] = True
    with open(cfg_path, "w") as f:
        json.dump(raw, f)
    os.utime(cfg_path, ns=(1, 10**18))
    train(model, opt, 8)
    mon.close()
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    assert set(s["head.weight/grad_norm"]) == {4, 6, 8}


def test_an_empty_parameter_has_no_series_and_raises_no_anomaly(tmp_path):
    """A zero-size parameter gave NaN for every statistic and an AnomalyNan at every step; the reference writes
    no rows of it."""
    torch.manual_seed(0)
    model = Net()
    model.empty = torch.nn.Parameter(torch.zeros(0, 4))
    mon, model, opt, run = _run(tmp_path, steps=3, model=model, wg_distribution=True, mv_distribution=True,
                                param_distribution=True, ops=ALL_OPS)
    assert mon.errors == 0
    s = read_scalars(run)
    assert "head.weight/grad_norm" in s and not [t for t in s if t.startswith("empty")]
    assert not read_anomalies(run)


def test_optimizer_without_step_hooks_is_wrapped(tmp_path):
    class Plain:  # an optimizer-like object without torch's step hooks (some framework wrappers)
        def __init__(self, inner):
            self.inner = inner
            self.param_groups = inner.param_groups
            self.state = inner.state

        def step(self):
            self.inner.step()

        def zero_grad(self):
            self.inner.zero_grad()

    torch.manual_seed(0)
    model = Net()
    opt = Plain(torch.optim.SGD(model.parameters(), lr=0.1))
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", wg_distribution=True))
    mon.set_monitor(model, opt)
    train(model, opt, 2)
    mon.close()
    assert set(read_scalars(str(tmp_path / "out" / "rank0"))["head.weight/grad_norm"]) == {0, 1}


def test_eval_forwards_are_not_recorded(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"head": {}}, xy_distribution=True))
    mon.set_monitor(model, opt)
    train(model, opt, 1)
    model.eval()
    with torch.no_grad():
        model(torch.randn(3, 8))  # an evaluation pass between steps: not part of step 1
    model.train()
    train(model, opt, 1, seed=3)
    mon.close()
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(tmp_path / "out" / "rank0"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("head/output_norm")] == [0, 1]  # one value per step: eval not counted


def test_activation_checkpoint_recomputation_is_not_recorded_twice(tmp_path):
    from torch.utils.checkpoint import checkpoint

    class Ckpt(Net):
        def forward(self, x):
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False)  # layer's forward runs again during backward
            return self.head(x)

    torch.manual_seed(0)
    model = Ckpt()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"layers.0": {}}, xy_distribution=True))
    mon.set_monitor(model, opt)
    train(model, opt, 2)
    mon.close()
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(tmp_path / "out" / "rank0"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("layers.0/output_norm")] == [0, 1]
    assert [e.step for e in acc.Scalars("layers.0/output_grad_norm")] == [0, 1]


def test_the_references_older_calls_and_keyword_work(tmp_path, caplog):
    """msprobe's documented TrainerMon(config_file_path=...) raised a TypeError, and its older calls still in
    26.2.0 (set_wrapped_optimizer + monitor_gnorm_with_ad, the deprecated reload_xy) an AttributeError."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    mon = TrainerMon(config_file_path=write_config(tmp_path, tmp_path / "out", targets={"layers.0": {}},
                                                   wg_distribution=True, ops=["norm"]))
    mon.set_wrapped_optimizer(opt)
    mon.monitor_gnorm_with_ad(model, grad_acc_steps=1)
    train(model, opt, 2)
    mon.reload_xy(True)               # activation statistics from now on
    train(model, opt, 2, seed=1)
    mon.close()
    assert mon.errors == 0 and "deprecated" in caplog.text
    s = read_scalars(str(tmp_path / "out" / "rank0"))
    assert set(s["layers.0.fc.weight/grad_norm"]) == {0, 1, 2, 3}
    assert set(s["layers.0/output_norm"]) == {2, 3}
    with pytest.raises(TypeError, match="once"):
        TrainerMon()
    with pytest.raises(TypeError, match="set_wrapped_optimizer"):
        TrainerMon(config_path=str(tmp_path / "monitor_config.json")).monitor_gnorm_with_ad(model)


class _Latent(torch.nn.Module):
    """A learned query fed straight into a block (a Parameter outliving every step), and a block called twice."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.latent = torch.nn.Parameter(torch.randn(4, d))
        self.block = torch.nn.Linear(d, d)
        self.act = torch.nn.Tanh()

    def forward(self, x):
        return self.act(self.block(self.latent) + x) + self.act(x)


def test_a_tensor_outliving_the_step_gets_one_gradient_hook_per_step_and_a_reused_module_one_value(tmp_path):
    """The activation-gradient hooks stayed on their tensors: a Parameter fed to a module gathered one more each
    step (step N wrote N values of its input_grad, each step slower than the last). A module called twice in a step
    wrote two values under one tag at that step, and the turbulence rule compared one call with the other's
    history, firing every step on a steady series: the last call's value is kept, as the reference keeps it."""
    torch.manual_seed(0)
    model = _Latent()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", xy_distribution=True, ops=["norm"],
                                  alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}]}))
    mon.set_monitor(model, opt)
    x = torch.randn(4, 8)
    for _ in range(12):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        assert not model.latent._backward_hooks   # (removed at the step's end)
    mon.close()
    assert mon.errors == 0
    run = str(tmp_path / "out" / "rank0")
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    for tag in ("block/input_grad_norm", "act/input_norm"):
        steps = [e.step for e in acc.Scalars(tag)]
        assert steps == list(range(12)), (tag, steps)
    # the Tanh's last call each step is act(x): the same x every step, so the same value
    values = [e.value for e in acc.Scalars("act/input_norm")]
    assert values == pytest.approx([x.norm().item()] * 12, rel=1e-6)
    assert not [a for a in read_anomalies(run) if a["tag"].startswith("act/")]


def test_mean_and_norm_of_a_finite_tensor_do_not_overflow_into_false_anomalies(tmp_path):
    """A causal LM's mask holds finfo.min: its float32 mean summed past float32's range (-inf) and its norm squared
    past it, and every step raised AnomalyNan on every layer taking the mask."""
    from tbprobe.monitor.stats import tensor_stats

    low = torch.finfo(torch.float32).min
    mask = torch.full((6, 6), low).triu(1)
    got = tensor_stats(mask, ["min", "max", "mean", "norm"], 1e-8).tolist()
    exact = mask.double()
    assert got[:2] == [low, 0.0]
    assert got[2] == pytest.approx(exact.mean().item(), rel=1e-6) and math.isfinite(got[2])
    assert got[3] == pytest.approx(exact.norm().item(), rel=1e-6) and got[3] > 3.4e38   # (past float32's range)
    # a tensor that holds an inf keeps it
    assert math.isinf(tensor_stats(torch.tensor([1.0, float("inf")]), ["mean"], 1e-8).item())

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 6)

        def forward(self, x, mask):
            return self.fc(x + mask.clamp(min=-1e4))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Masked()

        def forward(self, x):
            return self.inner(x, mask)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", xy_distribution=True, ops=["mean", "norm"]))
    mon.set_monitor(model, opt)
    for _ in range(3):
        model(torch.randn(6, 6)).sum().backward()
        opt.step()
        opt.zero_grad()
    mon.close()
    run = str(tmp_path / "out" / "rank0")
    assert read_scalars(run)["inner/input.1_mean"][0] == pytest.approx(exact.mean().item(), rel=1e-6)
    assert read_anomalies(run) == []


def test_the_anomaly_list_is_rewritten_at_most_every_few_seconds_and_complete_at_close(tmp_path, monkeypatch):
    """anomalies.json was rewritten whole at every step with an anomaly: a long run's list made each step slower
    than the last (the writer fell behind and its back-pressure reached training)."""
    from tbprobe.monitor import writer as writer_mod

    writes = []
    real = writer_mod._atomic_json
    monkeypatch.setattr(writer_mod, "_atomic_json",
                        lambda path, data: (writes.append(path) if path.endswith("anomalies.json") else None,
                                            real(path, data)))
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"layers.0": {}}, xy_distribution=True,
                                  ops=["norm"], alert={"non_finite": "every_step"}))
    mon.set_monitor(model, opt)
    model.layers[0].poison = float("nan")          # an AnomalyNan at every step (every_step: not only the first)
    train(model, opt, 40)
    mon.close()
    anomalies = read_anomalies(str(tmp_path / "out" / "rank0"))
    assert len(anomalies) == mon.anomalies and {a["step"] for a in anomalies} == set(range(40))
    # one write when the writer opens, a few while 40 steps run (the first anomaly's, then at most one every
    # ANOMALY_WRITE_SECS), one at close: not one per step
    assert len(writes) < 40 // 4, len(writes)


def test_adam_update_of_amsgrad_divides_by_the_running_maximum(tmp_path):
    """With amsgrad, adam_update was computed from exp_avg_sq, not the max_exp_avg_sq the step divides by."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
    before = {}

    def keep(*_):
        before["w"] = model.head.weight.detach().clone()

    opt.register_step_pre_hook(keep)
    # (a large first gradient: the second moment falls after it, and its running maximum stays)
    _, model, opt, run = _run(tmp_path, steps=3, model=model, opt=opt, targets={"head": {}}, ur_distribution=True,
                              ops=["norm"], train_kw={"scale": {0: 30.0}})
    s = read_scalars(run)
    step = (before["w"] - model.head.weight.detach()).norm().item()
    assert s["head.weight/adam_update_norm"][2] == pytest.approx(step, rel=1e-4)


def test_an_output_dir_that_cannot_be_written_is_an_error_at_set_monitor(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    model = Net()
    mon = TrainerMon(write_config(tmp_path, blocker / "mon", wg_distribution=True))
    with pytest.raises(TbprobeError, match="monitor output_dir .*not writable"):
        mon.set_monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
