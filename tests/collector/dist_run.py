"""Two gloo ranks, one collected step of DDP and collectives, under a collector (tbprobe or msprobe). Prints
{rank folder: [recorded names]} as JSON. test_distributed.py runs it with both tools.

usage: dist_run.py TOOL LEVEL DUMP_PATH
"""
import json
import logging
import os
import socket
import sys
import warnings

import torch.multiprocessing as mp
from runner_config import collector  # (this script's folder is on sys.path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, tool: str, level: str, dump: str, port: int) -> None:
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    debugger = collector(tool, os.path.join(dump, f"config{rank}.json"), dump, level, step=[0])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger.start(model=model)
    y = model(torch.randn(2, 4) + rank)
    t = y.detach().clone()
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    gathered = [torch.empty_like(t) for _ in range(2)]
    dist.all_gather(gathered, t)
    dist.all_to_all_single(torch.empty(4), torch.arange(4.0) + rank)
    dist.all_reduce(t, async_op=True).wait()
    if rank == 0:
        dist.send(t, dst=1)
    else:
        dist.recv(torch.empty_like(t), src=0)
    dist.barrier()
    objects = [None, None]
    dist.all_gather_object(objects, {"rank": rank})
    dist.broadcast_object_list(objects, src=0)
    y.sum().backward()
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
    dist.destroy_process_group()


def main() -> None:
    tool, level, dump = sys.argv[1:4]
    os.makedirs(dump, exist_ok=True)
    mp.spawn(_worker, args=(tool, level, dump, _free_port()), nprocs=2, join=True)
    names = {}
    for root, _, files in os.walk(dump):
        if "dump.json" in files:
            with open(os.path.join(root, "dump.json")) as f:
                names[os.path.basename(root)] = list(json.load(f)["data"])
    print(json.dumps(names))


if __name__ == "__main__":
    main()
