"""The monitor and the collector in one training loop: the collector must see the model's operators only,
never the monitor's own statistics (which would also shift every API call counter after them)."""
import json
import os
from glob import glob

import torch

from tbprobe import PrecisionDebugger, TrainerMon, seed_all
from tests.monitor.helpers import Net, write_config


def _dump_names(dump_path: str) -> list:
    (path,) = glob(os.path.join(dump_path, "step0", "*", "dump.json"))
    with open(path) as f:
        return list(json.load(f)["data"])


def _run(tmp_path, name: str, with_monitor: bool) -> list:
    seed_all(7)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    mon = None
    if with_monitor:
        cfg = write_config(tmp_path, tmp_path / f"mon_{name}", targets={"layers.0": {}, "layers.1": {}},
                           xy_distribution=True, wg_distribution=True, mv_distribution=True,
                           ops=["min", "max", "mean", "norm", "zeros", "nans"])
        mon = TrainerMon(cfg)
        mon.set_monitor(model, optimizer)
    dump_path = str(tmp_path / f"dump_{name}")
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=dump_path, step=[0])
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    debugger.start(model=model)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    debugger.stop()
    debugger.step()
    if mon is not None:
        mon.close()
        assert mon.errors == 0
    return _dump_names(dump_path)


def test_collector_does_not_record_the_monitors_statistics(tmp_path):
    alone = _run(tmp_path, "alone", with_monitor=False)
    together = _run(tmp_path, "together", with_monitor=True)
    assert any(n.startswith("Functional.linear.") for n in alone)
    for op in ("aminmax", "count_nonzero", "isnan", "vector_norm", "_foreach_norm"):
        assert not [n for n in together if f".{op}." in n], op
    assert together == alone
