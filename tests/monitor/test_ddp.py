"""Two real gloo processes under DistributedDataParallel: one run per rank, weight gradients before and after
the all-reduce."""
import os
import sys

import pytest
import torch.multiprocessing as mp

from tests.monitor.helpers import read_scalars, write_config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _worker(rank, world, init_file, cfg_path):
    sys.path.insert(0, ROOT)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tbprobe.monitor import TrainerMon
    from tests.monitor.helpers import Net

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)  # same weights on both ranks
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = TrainerMon(cfg_path)
    mon.set_monitor(model, opt)  # targets name the inner model: DDP's "module." is looked through
    g = torch.Generator().manual_seed(100 + rank)  # different data per rank
    for _ in range(3):
        model(torch.randn(4, 8, generator=g)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    mon.close()
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_two_ranks_reduced_and_unreduced(tmp_path):
    out = tmp_path / "out"
    cfg = write_config(tmp_path, out, targets={"layers.0": {}, "head": {}}, xy_distribution=True,
                       wg_distribution=True, ops=["mean", "norm"])
    mp.start_processes(_worker, args=(2, str(tmp_path / "init"), cfg), nprocs=2, join=True, start_method="spawn")
    assert sorted(os.listdir(out)) == ["rank0", "rank1"]
    r0, r1 = read_scalars(str(out / "rank0")), read_scalars(str(out / "rank1"))
    for step in range(3):
        tag = "head.weight/grad_{}"
        # after the all-reduce both ranks hold the same (averaged) gradient ...
        assert r0[tag.format("norm")][step] == pytest.approx(r1[tag.format("norm")][step], rel=1e-6)
        # ... before it, each rank its own
        u0, u1 = r0["head.weight/grad_unreduced_mean"][step], r1["head.weight/grad_unreduced_mean"][step]
        assert u0 != pytest.approx(u1, rel=1e-3)
        # and the reduced mean is the average of the unreduced means (DDP averages gradients)
        assert r0[tag.format("mean")][step] == pytest.approx((u0 + u1) / 2, rel=1e-4, abs=1e-7)
    assert "layers.0/output_norm" in r0 and "layers.0/output_norm" in r1
    assert r0["layers.0/input_norm"][0] != pytest.approx(r1["layers.0/input_norm"][0])  # per-rank data
