"""A record's statistics are those of the values at the call, whatever happens to the tensors after: in-place
changes after a hook, writes that bump no version (GradScaler's unscaling, batch_norm's running statistics, a
write through .data), a 0-dim tensor changed in place, inference tensors without a version counter; and values
that are not finite, counted and written as NaN and Infinity."""
import math

import pytest
import torch
from conftest import dump_of, make_debugger
from run_model import build

from tbprobe import PrecisionDebugger


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_gradients_unscaled_by_grad_scaler_are_summarised_as_they_are_then(tmp_path):
    """On CPU GradScaler's unscaling changes the gradients in place without bumping their version: at mix the
    clipping's and the optimizer's records reused the parameters_grad items, 65536 times too large (the
    reference reads them as they are)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    scaler = torch.amp.GradScaler("cpu")
    dbg = make_debugger(tmp_path, level="mix")
    dbg.start(model=model)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(torch.randn(4, 8)).float(), torch.randn(4, 4))
    scaler.scale(loss).backward()
    scaled = model[0].weight.grad.clone()
    scaler.unscale_(opt)
    unscaled = model[0].weight.grad.clone()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.step(opt)
    scaler.update()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0 and not torch.equal(scaled, unscaled)
    data = dump_of(tmp_path)["dump"]["data"]
    assert data["Module.0.Linear.parameters_grad.0"]["weight"][0]["Max"] == scaled.max().item()
    norm_in = data["Torch._foreach_norm.0.forward"]["input_args"][0][0]
    assert (norm_in["Max"], norm_in["Min"]) == (unscaled.max().item(), unscaled.min().item())


def test_in_place_changes_after_a_hook_do_not_reach_the_recorded_values(tmp_path):
    """Small tensors are copied when their hook ends and reduced later: a module output changed in place by the
    caller, and parameter gradients clipped in place after backward, keep the values their hooks saw."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(lin)
    x = torch.randn(2, 4)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L0", step=[0])
    dbg.start(model=model)
    out = model(x)
    expect_out = out.detach().clone()
    out.mul_(1000.0)                                   # the caller changes the recorded output in place
    out.sum().backward()
    expect_grad = lin.weight.grad.clone()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)   # scales every gradient in place
    assert lin.weight.grad.abs().max() < expect_grad.abs().max()
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    fwd = data["Module.0.Linear.forward.0"]["output"][0]
    assert fwd["Max"] == expect_out.max().item() and fwd["Min"] == expect_out.min().item()
    grads = data["Module.0.Linear.parameters_grad.0"]["weight"][0]
    assert grads["Max"] == expect_grad.max().item() and grads["Min"] == expect_grad.min().item()


def test_in_place_work_on_a_0_dim_tensor_records_its_value_before(tmp_path):
    # a 0-dim tensor's statistics are its value: read when the call is made, not at step end (AdamW's step count
    # `step_t += 1` read 1.0 for its first step)
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    zero, count, nan = torch.tensor(0.0), torch.tensor(3), torch.tensor(float("nan"))
    half = torch.tensor(2.0, dtype=torch.float16)
    dbg.start()
    zero += 1
    count += 1
    nan.fill_(1.0)
    half.mul_(2)
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    got = {k: data[k]["input_args"][0] for k in data}
    assert got["Tensor.__iadd__.0.forward"]["Max"] == 0.0 and got["Tensor.__iadd__.0.forward"]["zero_count"] == 1
    assert got["Tensor.__iadd__.1.forward"]["Max"] == 3 and got["Tensor.__iadd__.1.forward"]["zero_count"] == 0
    assert math.isnan(got["Tensor.fill_.0.forward"]["Max"]) and got["Tensor.fill_.0.forward"]["nan_count"] == 1
    assert got["Tensor.mul_.0.forward"]["Max"] == 2.0
    assert data["Tensor.__iadd__.0.forward"]["output"][0]["Max"] == 1.0


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_an_inference_mode_pass_inside_the_step_is_recorded_without_errors(tmp_path, level):
    # inference tensors have no version counter: reading one raised inside the hooks (counted as hook errors)
    dbg = make_debugger(tmp_path, level=level, steps=1)
    model, data, loss_fn = build("mlp")
    x, y = data[0]
    dbg.start(model=model)
    with torch.inference_mode():
        probe = model(x)
        probe.mul_(2.0)            # in-place work on an inference tensor
    loss_fn(model(x), y).backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data_ = dump_of(tmp_path)["dump"]["data"]
    out = data_["Module.fc2.Linear.forward.0"]["output"][0]
    assert out["Max"] == pytest.approx(probe.max().item() / 2.0) and out["shape"] == [4, 4]
    assert "Module.fc2.Linear.forward.1" in data_ and "Module.fc2.Linear.backward.1" in data_


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_parameters_and_buffers_written_without_a_version_bump_are_summarised_anew(tmp_path, level):
    """batch_norm's CPU kernel updates the running statistics in place without bumping their version, and so does
    a write through .data (an EMA, a hand-written optimizer): a second forward in the step recorded the values of
    the first, from the statistics cache. Parameters are not remembered, and a batch_norm call forgets its buffers."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    dbg = make_debugger(tmp_path, level=level, steps=1)
    dbg.start(model=model)
    seen = []
    for _ in range(3):
        seen.append((model[1].running_mean.max().item(), model[0].weight.max().item()))
        model(torch.randn(8, 4) * 3 + 1).sum().backward()
        model[0].weight.data.add_(10.0)
    dbg.stop()
    dbg.step()
    dbg.close()
    data = dump_of(tmp_path)["dump"]["data"]
    for i, (running_max, weight_max) in enumerate(seen):
        if level == "mix":
            bn = data[f"Functional.batch_norm.{i}.forward"]["input_args"]
            assert bn[1]["Max"] == pytest.approx(running_max, rel=1e-6), i
        assert data[f"Module.0.Linear.forward.{i}"]["parameters"]["weight"]["Max"] == pytest.approx(weight_max), i


def test_nonfinite_values_are_counted(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.tensor([1.0, 0.0, -1.0])
    dbg.start()
    y = torch.log(x)            # -inf and nan
    dbg.stop()
    dbg.step()
    dbg.close()
    out = dump_of(tmp_path)["dump"]["data"]["Torch.log.0.forward"]["output"][0]
    assert out["nan_count"] == 1 and out["inf_count"] == 1 and out["zero_count"] == 1
    assert math.isnan(out["Max"]) and math.isnan(out["Norm"])      # NaN in the file, as the reference writes
    assert y.isnan().sum() == 1


@pytest.mark.parametrize("case", ["scalar", "overflow", "finite"])
def test_nonfinite_numbers_survive_the_fast_encoder(tmp_path, case):
    """A step is written by orjson unless it holds a NaN/Inf anywhere, since orjson would write null: a float
    argument, or a Norm that overflows float32 while Max/Min are finite."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.full((4,), 3e38) if case == "overflow" else torch.tensor([1.0, 2.0])
    dbg.start()
    y = torch.div(x, float("inf") if case == "scalar" else 0.5)     # inf as an argument, a finite output
    dbg.stop()
    dbg.step()
    dbg.close()
    entry = dump_of(tmp_path)["dump"]["data"]["Torch.div.0.forward"]
    assert torch.isfinite(y).all() != (case == "overflow")
    if case == "scalar":
        assert entry["input_args"][1] == {"type": "float", "value": math.inf}
    elif case == "overflow":
        assert entry["input_args"][0]["Max"] == x.max().item() and entry["input_args"][0]["Norm"] == math.inf
    else:
        assert entry["input_args"][1] == {"type": "float", "value": 0.5}
        assert entry["output"][0]["Norm"] == pytest.approx(math.sqrt(20.0))
