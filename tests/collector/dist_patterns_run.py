"""One rank of a gloo job running the distributed training patterns of test_distributed_patterns.py, each under
its own debugger (its own dump path, OUT/<scenario>/dump) and, where training runs, first without one. Each
scenario writes OUT/<scenario>/rank<R>.json: what the test compares the dump with (the plain run's losses against
the collected run's, values read on the rank, hook_errors).

usage (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, as conftest.launch_ranks sets them):
    dist_patterns_run.py OUT SCENARIO...      scenarios: async collectives subgroups dtensor fsdp ddp filter
    dist_patterns_run.py OUT late MODE        init_process_group after PrecisionDebugger(), start() or step 0
"""
import gc
import json
import os
import sys
import time
from typing import Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)        # (started by runpy.run_path from `python -c`: this folder is not on sys.path)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from runner_config import collector, load_tool  # noqa: E402

PrecisionDebugger = load_tool("tbprobe").PrecisionDebugger
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def _debugger(out: str, scenario: str, level: str = "L1", step: Iterable[int] = (0,), **cfg) -> PrecisionDebugger:
    """tbprobe's debugger dumping into OUT/<scenario>/dump: `level`, `step`, and `cfg`'s keys (rank ...); no
    statistics block (the collector's defaults)."""
    folder = os.path.join(out, scenario)
    return collector("tbprobe", os.path.join(folder, f"config{RANK}.json"), os.path.join(folder, "dump"), level,
                     step=step, block=None, **cfg)


def _result(out: str, scenario: str, result: dict) -> None:
    with open(os.path.join(out, scenario, f"rank{RANK}.json"), "w") as f:
        json.dump(result, f)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(_local(x), _local(y)) for x, y in zip(a, b))


def _full(value: float, n: int = 2) -> torch.Tensor:
    return torch.full((n,), float(value))


# --- asynchronous calls ----------------------------------------------------------------------------------------
def _until(done, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not done() and time.monotonic() < end:
        time.sleep(0.001)


def async_ops(out: str) -> None:
    peer = 1 - RANK
    dbg = _debugger(out, "async", step=[0, 1])
    res = {}
    # step 0
    dbg.start()
    a = _full(RANK + 1)
    w = dist.all_reduce(a, async_op=True)
    torch.mul(torch.ones(2), 3)                       # Torch.mul.0: compute before the wait
    w.wait()
    torch.mul(a, 1)                                   # Torch.mul.1: sees 3
    # waited for in the next step (gloo's reduce_scatter handle never says it completed): not this step's record,
    # nor the next one's
    held_out = torch.zeros(1)
    held = dist.reduce_scatter_tensor(held_out, _full(RANK + 1), async_op=True)
    never = dist.all_reduce(_full(10 * (RANK + 1), 3), async_op=True)  # a handle never waited for
    recv = torch.zeros(2)
    if RANK == 0:
        sent = dist.isend(_full(7), 1)
        got = dist.irecv(recv, 1)
    else:
        got = dist.irecv(recv, 0)
        sent = dist.isend(_full(9), 0)
    torch.mul(torch.ones(1), 2)                       # Torch.mul.2: compute while the pair is in flight
    sent.wait()
    got.wait()
    back = torch.zeros(2)
    ops = [dist.P2POp(dist.isend, _full(20 + RANK), peer), dist.P2POp(dist.irecv, back, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    late_out = torch.zeros(1)
    late = dist.reduce_scatter_tensor(late_out, _full(RANK + 1), async_op=True)
    dbg.stop()
    late.wait()                                       # after stop(), before step(): still step 0's
    # (gloo's two worker threads may finish the unwaited all_reduce after `late`: the collector records it if it
    # completed by the step's end, which on a loaded machine it may not have, without this)
    _until(never.is_completed)
    dbg.step()
    res["recv"] = recv.tolist()
    res["back"] = back.tolist()
    res["late"] = late_out.tolist()
    # step 1
    dbg.start()
    held.wait()
    res["held"] = held_out.tolist()
    torch.mul(held_out, 1)                            # Torch.mul.0 of step 1
    dist.all_reduce(_full(RANK + 1))                  # Distributed.all_reduce.0 of step 1
    dbg.stop()
    dbg.step()
    dbg.close()
    res["errors"] = dbg.hook_errors
    res["wait_restored"] = getattr(dist.Work.wait, "__wrapped__", None) is None
    _result(out, "async", res)


# --- collectives beyond all_reduce ------------------------------------------------------------------------------
def collectives(out: str) -> None:
    dbg = _debugger(out, "collectives")
    dbg.start()
    dist.broadcast(_full(RANK + 1), src=0)
    dist.all_gather([torch.empty(2) for _ in range(WORLD)], _full(RANK))
    dist.all_gather_into_tensor(torch.empty(2 * WORLD), _full(RANK))
    dist.all_gather_single(torch.empty(2 * WORLD), _full(RANK + 5))
    dist.reduce_scatter_tensor(torch.empty(1), torch.arange(float(WORLD)) + RANK)
    dist.reduce_scatter_single(torch.empty(1), torch.arange(float(WORLD)) + RANK)
    dist.reduce_scatter(torch.empty(1), [_full(RANK + 1, 1) for _ in range(WORLD)])
    dist.reduce(_full(RANK + 1), dst=0)
    dist.barrier()                                    # not recorded, as the reference does not record it
    dist.all_to_all_single(torch.empty(WORLD), torch.arange(float(WORLD)) + 10 * RANK)
    dist.all_to_all([torch.empty(1) for _ in range(WORLD)], [_full(RANK, 1) for _ in range(WORLD)])
    dist.gather(_full(RANK, 1), [torch.empty(1) for _ in range(WORLD)] if RANK == 0 else None, dst=0)
    dist.scatter(torch.empty(1), [_full(i, 1) for i in range(WORLD)] if RANK == 0 else None, src=0)
    dist.all_gather_single(torch.empty(2 * WORLD), _full(RANK + 1), async_op=True).wait()
    dbg.stop()
    dbg.step()
    dbg.close()
    _result(out, "collectives", {"errors": dbg.hook_errors})


def subgroups(out: str) -> None:
    """Four ranks: a tensor-parallel pair ([0, 1], [2, 3]) and a data-parallel pair across them ([0, 2], [1, 3])."""
    tp = [dist.new_group([0, 1]), dist.new_group([2, 3])][RANK // 2]
    dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][RANK % 2]
    dbg = _debugger(out, "subgroups")
    dbg.start()
    dist.all_reduce(_full(RANK + 1), group=tp)
    dist.broadcast(_full(RANK + 1), src=2 * (RANK // 2) + 1, group=tp)     # a global rank
    dist.all_reduce(_full(RANK + 1), group=dp, async_op=True).wait()
    if RANK % 2 == 0:
        dist.send(_full(RANK), dst=RANK + 1, group=tp)
    else:
        dist.recv(torch.zeros(2), src=RANK - 1, group=tp)
    dbg.stop()
    dbg.step()
    dbg.close()
    _result(out, "subgroups", {"errors": dbg.hook_errors})


# --- tensor parallel, FSDP2, DDP: bitwise against the plain run ------------------------------------------------
def _mesh():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (WORLD,))


def _train(build, dbg, steps: int = 2, micro=None):
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1 + RANK)
    losses = []
    for step in range(steps):
        if dbg is not None:
            dbg.start(model=model)
        if micro is None:
            loss = (model(torch.randn(3, 4, generator=gen)) ** 2).mean()
            loss.backward()
            losses.append(_local(loss).item())
        else:
            losses.extend(micro(model, gen, step))
        opt.step()
        opt.zero_grad()
        if dbg is not None:
            dbg.stop()
            dbg.step()
    return losses, [p.detach().clone() for p in model.parameters()]


def dtensor(out: str) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = _mesh()

    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        return model

    def tensors():
        dt = distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, [Shard(0)])
        y = torch.mul(dt, 2)
        z = y.redistribute(mesh, [Replicate()])
        return [y, z, z.sum(), torch.exp(dt)]

    plain, plain_tensors = _train(build, None), tensors()
    dbg = _debugger(out, "dtensor", level="mix", step=[0, 1, 2])
    losses, params = _train(build, dbg)
    dbg.start(model=dbg.model)                        # step 2: DTensors made and computed with
    got = tensors()
    dbg.stop()
    dbg.step()
    dbg.close()
    _result(out, "dtensor", {"errors": dbg.hook_errors, "losses": [losses, plain[0]],
                             "same_params": _same(params, plain[1]), "same_tensors": _same(got, plain_tensors),
                             "w0_max": _local(params[0]).max().item(),
                             "local_max": [_local(t).max().item() for t in got]})


def fsdp(out: str) -> None:
    from torch.distributed.fsdp import fully_shard

    mesh = _mesh()

    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    plain = _train(build, None)
    res = {"plain": plain[0]}
    for level in ("L0", "L1"):
        dbg = _debugger(out, f"fsdp_{level}", level=level, step=[0, 1])
        losses, params = _train(build, dbg)
        dbg.close()
        res[level] = {"losses": losses, "same_params": _same(params, plain[1]), "errors": dbg.hook_errors}
    _result(out, "fsdp_L0", res)


class _Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 4)
        self.c = nn.Linear(8, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x, branch):
        h = torch.relu(self.a(x))
        return self.b(h) if branch == 0 else self.c(h)


def ddp(out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def build():
        torch.manual_seed(0)
        # a bucket per parameter or so (bucket_cap_mb tiny): several buckets reduced as backward goes
        return DDP(_Branches(), find_unused_parameters=True, bucket_cap_mb=0.0001)

    grads = {}

    def micro(model, gen, step):
        losses = []
        for i in range(2):                            # gradient accumulation: the first micro-batch under no_sync
            x = torch.randn(2, 4, generator=gen)
            if i == 0:
                with model.no_sync():
                    loss = model(x, step).pow(2).mean()
                    loss.backward()
            else:
                loss = model(x, step).pow(2).mean()
                loss.backward()
            losses.append(loss.item())
            live = model.module.b if step == 0 else model.module.c
            grads.setdefault(step, []).append(live.weight.grad.max().item())
        return losses

    plain = _train(build, None, micro=micro)
    grads.clear()
    dbg = _debugger(out, "ddp", level="mix", step=[0, 1])
    losses, params = _train(build, dbg, micro=micro)
    dbg.close()
    _result(out, "ddp", {"errors": dbg.hook_errors, "losses": [losses, plain[0]],
                         "same_params": _same(params, plain[1]), "grad_max": grads})


def rank_filter(out: str) -> None:
    dbg = _debugger(out, "filter", level="mix", rank=[1], step=[0, 1])
    model = nn.Linear(2, 2)
    for _ in range(2):
        dbg.start(model=model)
        t = model(torch.ones(1, 2))
        dist.all_reduce(t.detach().clone())
        t.sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    _result(out, "filter", {"errors": dbg.hook_errors})


SCENARIOS = {"async": async_ops, "collectives": collectives, "subgroups": subgroups, "dtensor": dtensor,
             "fsdp": fsdp, "ddp": ddp, "filter": rank_filter}


# --- the rank known late ----------------------------------------------------------------------------------------
def late(out: str, mode: str) -> None:
    """`"rank": [1]`, no RANK variable (as under mp.spawn); init_process_group after PrecisionDebugger(), inside
    the first collected step or after it; destroy_process_group() inside the second step, two more steps after it."""
    os.environ.pop("RANK")
    dbg = _debugger(out, "late", level="mix", rank=[1], step=[0, 1, 2, 3])
    if mode == "after_ctor":
        dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    model = nn.Linear(2, 2)
    for step in range(4):
        dbg.start(model=model)
        if mode == "after_start" and step == 0:
            dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
        y = model(torch.ones(1, 2))
        if dist.is_initialized():
            dist.all_reduce(y.detach().clone())
        y.sum().backward()
        if step == 1:
            dist.destroy_process_group()
        dbg.stop()
        dbg.step()
        if mode == "after_step0" and step == 0:
            dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    dbg.close()
    _result(out, "late", {"errors": dbg.hook_errors})


def main() -> None:
    out = sys.argv[1]
    torch.set_num_threads(1)
    if sys.argv[2] == "late":
        late(out, sys.argv[3])
        return
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    for name in sys.argv[2:]:
        SCENARIOS[name](out)
    # DDP, FSDP and DeviceMesh leave reference cycles that hold tensors of gloo's work; freed at interpreter
    # shutdown they abort the process ("terminate called without an active exception", 1 run in 2 for DDP alone,
    # with or without a debugger). Freed now, while the interpreter is whole.
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
