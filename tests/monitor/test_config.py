"""Bad configurations and bad set_monitor arguments give one clear TbprobeError before training starts."""
import json

import pytest
import torch

from tbprobe.errors import TbprobeError
from tbprobe.monitor import TrainerMon, load_config
from tests.monitor.helpers import Net, write_config


def _cfg(tmp_path, raw) -> str:
    p = tmp_path / "c.json"
    p.write_text(json.dumps(raw) if not isinstance(raw, str) else raw)
    return str(p)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"targetz": {}}, "unknown key 'targetz' (did you mean 'targets'?)"),
        ({"ops": ["norm", "median"]}, "unknown statistic 'median'"),
        ({"ops": "norm"}, "'ops' must be a list"),
        ({"xy_distribution": "yes"}, "'xy_distribution' must be true or false"),
        ({"eps": -1}, "'eps' must be a positive number"),
        ({"step_interval": 0}, "'step_interval' must be an integer >= 1"),
        # (0 recorded nothing, without a word: no files, exit 0)
        ({"collect_times": 0}, "'collect_times' must be an integer >= 1, got 0"),
        ({"alert": {"non_finite": "sometimes"}}, "'alert.non_finite' must be one of change, every_step, off"),
        ({"start_step": "3"}, "'start_step' must be an integer >= 0"),
        ({"targets": {"layers.0": 3}}, "'targets' entry 'layers.0' must map to an object"),
        ({"alert": {"rules": [{"rule_name": "Spiky"}]}}, "needs a rule_name from"),
        ({"alert": {"rules": [{"rule_name": "AnomalyTurbulence"}]}}, "AnomalyTurbulence needs args.threshold"),
        ({"alert": {"rules": [{"rule_name": "AnomalyNan", "args": {"threshold": -2}}]}}, "threshold must be"),
        ({"module_ranks": [0, "1"]}, "'module_ranks' must be a list of rank numbers"),
        ({"alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1, "ops": ["p99"]}}]}},
         "args.ops must be a non-empty list of statistics"),
        ({"forward_only": True, "backward_only": True}, "cannot both be true"),
        # keys tbprobe ignores still get the values the reference takes (it refuses these)
        ({"ndigits": 1000}, "'ndigits' must be an integer from 1 to 20"),
        ({"ndigits": "x"}, "'ndigits' must be an integer from 1 to 20"),
        ({"sa_order": "x,y"}, "'sa_order' must be one of"),
        ({"print_struct": "yes"}, "'print_struct' must be true or false"),
        ({"squash_name": "yes"}, "'squash_name' must be true or false"),
        ({"cc_distribution": {"enable": "yes"}}, "'enable' must be true or false"),
        ({"cc_distribution": {"foo": 1}}, "unknown key 'foo'"),
        ({"append_output": ["a"]}, "'append_output' must be a list of no or two items"),
        ({"step_count_per_record": 0}, "'step_count_per_record' must be an integer from 1"),
        ({"l2_targets": {"foo": []}}, "'l2_targets' key 'foo' must be one of"),
        ({"mg_distribution": 1}, "'mg_distribution' must be true or false"),
        ([1, 2], "must be a JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_config_is_one_clear_message(tmp_path, raw, expected):
    path = _cfg(tmp_path, raw)
    with pytest.raises(TbprobeError) as info:
        TrainerMon(path)
    message = str(info.value)
    assert expected in message
    assert message.startswith(path)  # names the file
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(TbprobeError, match="not found"):
        TrainerMon(str(tmp_path / "nope.json"))


def test_reference_config_is_accepted(tmp_path):
    # The reference monitor's own example keys, including ones tbprobe ignores, load without error.
    raw = {
        "targets": {"layers.0": {}}, "xy_distribution": True, "wg_distribution": True, "mv_distribution": True,
        "param_distribution": True, "ops": ["min", "max", "norm", "zeros", "nans", "mean", "shape", "dtype"],
        "eps": 1e-8, "format": "csv", "ndigits": 6, "alert": {"rules": [{"rule_name": "AnomalyTurbulence",
        "args": {"threshold": 0.5}}], "dump": False}, "squash_name": False, "collect_times": 10,
        "mg_distribution": False,   # (a key msprobe's validate_config checks: refused as unknown, once)
    }
    cfg = load_config(_cfg(tmp_path, raw))
    assert cfg.ops == ["min", "max", "mean", "norm", "zeros", "nans"]  # canonical order, shape/dtype dropped
    assert cfg.collect_times == 10 and cfg.alert_rules[0].threshold == 0.5


def test_target_matching_nothing_fails_at_set_monitor(tmp_path):
    path = write_config(tmp_path, tmp_path / "out", targets={"layers.0": {}, "layer.1": {}}, xy_distribution=True)
    mon = TrainerMon(path)
    model = Net()
    with pytest.raises(TbprobeError) as info:
        mon.set_monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert "monitor target 'layer.1' matches no module or parameter" in str(info.value)
    assert "layers.1" in str(info.value)  # suggests the close name
    assert not (tmp_path / "out").exists()  # nothing written


def test_bad_set_monitor_arguments(tmp_path):
    path = write_config(tmp_path, tmp_path / "out", wg_distribution=True)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TbprobeError, match="grad_acc_steps must be an integer >= 1"):
        TrainerMon(path).set_monitor(model, opt, grad_acc_steps=0)

    class Wrapped:  # a DeepSpeed-like wrapper: has step() but no param_groups
        def __init__(self, inner):
            self.optimizer = inner

        def step(self):
            self.optimizer.step()

    with pytest.raises(TbprobeError, match="pass the wrapped optimizer, optimizer.optimizer"):
        TrainerMon(path).set_monitor(model, Wrapped(opt))


@pytest.mark.parametrize("raw, warned", [
    ({"mg_direction": True}, ["mg_direction"]),
    ({"stack_info": True, "print_struct": True}, ["stack_info"]),   # (print_struct lists the modules)
    ({"step_count_per_record": 3, "ndigits": 3, "format": "tensorboard"}, ["format", "step_count_per_record",
                                                                          "ndigits"]),
    # off, empty or the reference's default: asks for nothing, no word
    ({"mg_direction": False, "stack_info": False, "step_count_per_record": 1, "ndigits": 6, "format": "csv",
      "l2_targets": {}, "append_output": []}, []),
])
def test_an_ignored_key_that_asks_for_something_is_named_once(tmp_path, caplog, raw, warned):
    with caplog.at_level("WARNING", logger="tbprobe"):
        load_config(_cfg(tmp_path, raw))
    named = [r.getMessage().split("'")[1] for r in caplog.records if "not implemented by tbprobe" in r.getMessage()]
    assert sorted(named) == sorted(warned)


def test_module_ranks_naming_no_rank_of_the_run_is_one_warning(tmp_path, caplog):
    """module_ranks: [1] in a single process recorded nothing, without a word."""
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", wg_distribution=True, module_ranks=[1]))
    with caplog.at_level("WARNING", logger="tbprobe"):
        mon.set_monitor(model, opt)
    lines = [r.getMessage() for r in caplog.records if "module_ranks" in r.getMessage()]
    assert len(lines) == 1 and "names no rank of this run" in lines[0] and "nothing is recorded on rank 0" in lines[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="tbprobe"):   # a list naming this rank: no word
        TrainerMon(write_config(tmp_path, tmp_path / "out", wg_distribution=True, module_ranks=[0, 1])).set_monitor(
            model, opt)
    assert not [r for r in caplog.records if "module_ranks" in r.getMessage()]


def test_print_struct_lists_the_target_names_and_training_goes_on(tmp_path, caplog):
    """The reference prints the module structure (how users find target names) and stops the run; print_struct was
    ignored here. It lists them now (log and file), and records as configured."""
    from tests.monitor.helpers import read_scalars, train

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", wg_distribution=True, print_struct=True))
    with caplog.at_level("WARNING", logger="tbprobe"):
        mon.set_monitor(model, opt)
    text = "\n".join(r.getMessage() for r in caplog.records if "print_struct" in r.getMessage())
    for name, cls in (("layers.0", "Block"), ("layers.0.fc", "Linear"), ("head", "Linear")):
        assert any(line.split() == [name, cls] for line in text.splitlines()), name
    struct = json.loads((tmp_path / "out" / "module_struct" / "rank0" / "module_struct.json").read_text())
    assert struct == {"layers": "ModuleList", "layers.0": "Block", "layers.0.fc": "Linear", "layers.1": "Block",
                      "layers.1.fc": "Linear", "head": "Linear"}
    train(model, opt, 2)
    mon.close()
    assert set(read_scalars(str(tmp_path / "out" / "rank0"))["head.weight/grad_norm"]) == {0, 1}
