"""The always-on non-finite check: a NaN or Inf is reported at the step it appears, not at every step it stays, and
a module input that needs no gradient and is non-finite by design (a causal mask of -inf) is no anomaly at all.

It fired on the mask at every step in every layer (3600 of 8214 entries in a 300-step GPT run), with no way to
turn it off: the dashboard's anomaly list opened on a wall of them and a real NaN was buried.
"""
import math

import torch

from tbprobe.monitor import TrainerMon
from tests.monitor.helpers import Net, read_anomalies, read_scalars, write_config


class Masked(torch.nn.Module):
    def __init__(self, d=8, t=4):
        super().__init__()
        self.t = t
        self.fc = torch.nn.Linear(d, d)
        self.blocks = torch.nn.ModuleList([MaskedBlock(d) for _ in range(2)])

    def forward(self, x):
        mask = torch.full((self.t, self.t), float("-inf")).triu(1)
        h = self.fc(x)
        for b in self.blocks:
            h = b(h, mask)          # the mask as a positional input: `<block>/input.1`
        return h


class MaskedBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)

    def forward(self, h, mask):
        w = (h @ h.transpose(-1, -2) + mask).softmax(-1)
        return h + self.proj(w @ h)


def _loop(model, opt, steps, poison=None, nan_input_at=None, t=4, d=8):
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        if poison is not None:
            poison(step)
        x = torch.randn(2, t, d, generator=g) if isinstance(model, Masked) else torch.randn(4, 8, generator=g)
        if step == nan_input_at:
            x[0, 0] = float("nan")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


def _monitor(tmp_path, model, opt, **cfg):
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", **cfg))
    mon.set_monitor(model, opt)
    return mon


def test_a_mask_of_minus_inf_is_no_anomaly_with_or_without_an_alert_section(tmp_path):
    for alert in (None, {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}]}):
        out = tmp_path / ("alert" if alert else "plain")
        out.mkdir()
        torch.manual_seed(0)
        model = Masked()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        cfg = dict(xy_distribution=True, wg_distribution=True, ops=["min", "max", "mean", "norm"])
        if alert:
            cfg["alert"] = alert
        mon = _monitor(out, model, opt, **cfg)
        _loop(model, opt, 6)
        mon.close()
        run = str(out / "out" / "rank0")
        s = read_scalars(run)
        assert math.isinf(s["blocks.0/input.1_min"][5]) and math.isinf(s["blocks.1/input.1_norm"][0])
        assert not [a for a in read_anomalies(run) if a["rule"] == "AnomalyNan"]
        assert not [t for t in s if t.startswith("anomaly/AnomalyNan/")]


def test_a_nan_is_reported_where_it_appears_in_outputs_gradients_and_weights_and_not_again(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mon = _monitor(tmp_path, model, opt, targets={"layers.0": {}, "head": {}}, xy_distribution=True,
                   wg_distribution=True, param_distribution=True, ops=["max", "norm"])

    def poison(step):   # one step of NaN in layers.0's output: every weight is NaN after that step's update
        model.layers[0].poison = float("nan") if step == 3 else None

    _loop(model, opt, 8, poison=poison)
    mon.close()
    found = {}
    for a in read_anomalies(str(tmp_path / "out" / "rank0")):
        if a["rule"] == "AnomalyNan":
            found.setdefault(a["tag"], []).append(a["step"])
    for tag, step in [("layers.0/output_norm", 3), ("layers.0/output_grad_norm", 3), ("head/input_grad_norm", 3),
                      ("layers.0.fc.weight/grad_norm", 3), ("head.weight/param_updated_norm", 3),
                      ("head.weight/param_norm", 4), ("head/input_norm", 3)]:
        assert found.get(tag) == [step], (tag, found.get(tag))   # at its first step, once though it stays NaN
    assert min(s for steps in found.values() for s in steps) == 3


def test_every_step_reports_each_step_and_off_reports_none(tmp_path):
    for mode, want in (("every_step", [3, 4, 5]), ("off", None)):
        out = tmp_path / mode
        out.mkdir()
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        mon = _monitor(out, model, opt, targets={"layers.0": {}}, xy_distribution=True,
                       alert={"non_finite": mode})
        block = model.layers[0]
        _loop(model, opt, 6, poison=lambda step, block=block: setattr(block, "poison",
                                                                      float("nan") if step >= 3 else None))
        mon.close()
        steps = [a["step"] for a in read_anomalies(str(out / "out" / "rank0")) if a["tag"] == "layers.0/output_norm"]
        assert steps == (want or []), (mode, steps)


def test_an_input_needing_no_gradient_that_turns_nan_is_still_reported(tmp_path):
    """The data batch needs no gradient either: finite at first, its NaN later is a change, reported."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    mon = _monitor(tmp_path, model, opt, targets={"layers.0": {}}, xy_distribution=True)
    _loop(model, opt, 6, nan_input_at=4)
    mon.close()
    found = [(a["step"], a["tag"]) for a in read_anomalies(str(tmp_path / "out" / "rank0"))]
    assert (4, "layers.0/input_norm") in found and (4, "layers.0/output_norm") in found
    assert min(step for step, _ in found) == 4
