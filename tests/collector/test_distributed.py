"""Two processes, gloo: collectives, point to point (sync and async) and DDP, each rank in its own folder."""
import json
import os
import subprocess
import sys

import pytest
import torch.multiprocessing as mp
from conftest import PEER_PYTHON, free_port, need_peers, stack_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def _worker(rank: int, dump: str, port: int) -> None:
    sys.path.insert(0, HERE)
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dbg = PrecisionDebugger(dump_path=dump, level="mix", step=[0, 1])   # created before the process group
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        dbg.start(model=model)
        y = model(torch.randn(2, 4) + rank)
        t = y.detach().clone()
        dist.all_reduce(t)
        big = torch.full((1 << 15,), float(rank + 1))   # past the size whose statistics fill() remembers
        dist.all_reduce(big)                            # written in place with no version bump
        if rank == 0:
            dist.send(t, dst=1)
            work = dist.isend(t * 2, dst=1)
            work.wait()
        else:
            buf = torch.empty_like(t)
            dist.recv(buf, src=0)
            buf2 = torch.empty_like(t)
            work = dist.irecv(buf2, src=0)
            work.wait()
            assert torch.equal(buf2, buf * 2)
        y.sum().backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()
    dbg.close()
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_gloo(tmp_path):
    dump = str(tmp_path / "dump")
    mp.spawn(_worker, args=(dump, free_port()), nprocs=2, join=True)
    for step in (0, 1):
        assert sorted(os.listdir(os.path.join(dump, f"step{step}"))) == ["rank0", "rank1"]
    data = {}
    for rank in (0, 1):
        with open(os.path.join(dump, "step0", f"rank{rank}", "dump.json")) as f:
            data[rank] = json.load(f)["data"]
        with open(os.path.join(dump, "step0", f"rank{rank}", "construct.json")) as f:
            construct = json.load(f)
        assert "Module.module.0.Linear.forward.0" in data[rank]           # DDP's wrapped modules
        assert "Module.module.0.Linear.parameters_grad.0" in data[rank]
        ar = data[rank]["Distributed.all_reduce.0.forward"]
        assert ar["output"][0]["Max"] >= ar["input_args"][0]["Max"] or ar["output"][0]["Min"] <= ar["input_args"][0]["Min"]
        assert construct["Distributed.all_reduce.0.forward"] is None
        big = data[rank]["Distributed.all_reduce.1.forward"]
        assert big["input_args"][0]["Max"] == rank + 1 and big["output"][0]["Max"] == 3.0
    assert "Distributed.send.0.forward" in data[0] and "Distributed.isend.0.forward" in data[0]
    assert data[0]["Distributed.send.0.forward"]["input_kwargs"]["dst"] == {"type": "int", "value": 1}
    recv = data[1]["Distributed.recv.0.forward"]
    irecv = data[1]["Distributed.irecv.0.forward"]          # recorded after wait(): holds the received values
    assert irecv["output"][0]["Max"] == pytest.approx(2 * recv["output"][0]["Max"])
    # all_reduce gives both ranks the same result
    assert data[0]["Distributed.all_reduce.0.forward"]["output"][0]["Norm"] == \
        data[1]["Distributed.all_reduce.0.forward"]["output"][0]["Norm"]


def _async_worker(rank: int, dump: str, port: int) -> None:
    import time

    import torch
    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg = PrecisionDebugger(dump_path=dump, level="mix", step=[0, 1])
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Linear(3, 1))
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)   # its all_reduce is waited for by its future
    handles = []
    for step in range(2):
        dbg.start(model=model)
        model(torch.ones(1, 2)).sum().backward()
        a = torch.full((2,), float(rank + 1))
        w = dist.all_reduce(a, dist.ReduceOp.MAX, None, True)   # async_op by position
        handles.append(w)
        w.wait()
        dist.all_reduce(torch.full((2,), float(rank + 1)), async_op=True).get_future().wait()
        w = dist.all_reduce(torch.full((2,), float(rank + 1)), async_op=True)
        while not w.is_completed():
            time.sleep(0.001)
        t = torch.full((3,), 5.0) if rank == 0 else torch.zeros(3)
        ops = [dist.P2POp(dist.isend if rank == 0 else dist.irecv, t, 1 - rank)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        # (gloo's handle of a reduce_scatter never says it completed, and has no future: waited by wait() alone)
        dist.reduce_scatter_tensor(torch.zeros(1), torch.full((2,), float(rank + 1)), async_op=True).wait()
        ddp(torch.full((2, 3), float(rank + 1))).sum().backward()
        if step == 1:
            dist.destroy_process_group()   # before the step ends: its folder is still the rank's
        dbg.stop()
        dbg.step()
    dbg.close()
    assert all(isinstance(h, dist.Work) for h in handles) and dbg.hook_errors == 0


@pytest.mark.slow
def test_asynchronous_collectives_are_recorded_once_complete_however_they_are_waited_for(tmp_path):
    """async_op given by position was recorded before the collective completed; a handle waited through its
    future or polled with is_completed() was never recorded (nor are DDP's communication hooks' all_reduce);
    the handle the user got was not a torch.distributed.Work; an asynchronous reduce_scatter waited for by wait()
    was never recorded (gloo's handle never reports itself complete); batch_isend_irecv's operations and a ReduceOp were
    written as null, and then an irecv's buffer before the call was summarised (allocator leftovers); a collective right after backward() came ahead of the module backward records complete
    before it; and a step ended after destroy_process_group() went to a proc<pid> folder."""
    dump = str(tmp_path / "dump")
    mp.spawn(_async_worker, args=(dump, free_port()), nprocs=2, join=True)
    bucket = {}
    for step in (0, 1):
        assert sorted(os.listdir(os.path.join(dump, f"step{step}"))) == ["rank0", "rank1"]
        for rank in (0, 1):
            with open(os.path.join(dump, f"step{step}", f"rank{rank}", "dump.json")) as f:
                data = json.load(f)["data"]
            names = list(data)
            assert names.index("Module.0.Linear.backward.0") < names.index("Distributed.all_reduce.0.forward")
            ar = [data[f"Distributed.all_reduce.{i}.forward"] for i in range(3)]
            assert ar[0]["input_args"][1] == {"type": "torch.distributed.ReduceOp", "value": "RedOpType.MAX"}
            assert ar[0]["input_args"][0]["Max"] == rank + 1 and ar[0]["output"][0]["Max"] == 2.0
            assert ar[1]["output"][0]["Max"] == 3.0 and ar[2]["output"][0]["Max"] == 3.0
            batch = data["Distributed.batch_isend_irecv.0.forward"]
            (op,) = batch["input_args"][0]
            assert op["class_type"] == "torch.distributed.P2POp" and op["peer"] == 1 - rank
            assert op["op"] == ("isend" if rank == 0 else "irecv")
            # an irecv's buffer before the call is what the allocator left there (a false overflow): null, as
            # recv's; the tensor an isend sends is there
            assert op["tensor"] is None if rank == 1 else op["tensor"]["Max"] == 5.0, op
            # the received tensor after the batch completed
            assert batch["output"][0][0]["tensor"]["Max"] == 5.0
            scattered = data["Distributed.reduce_scatter_tensor.0.forward"]
            assert scattered["output"][0]["Max"] == 3.0, scattered   # (1 + 2, after the call)
            bucket.setdefault(step, []).append(data["Distributed.all_reduce.3.forward"]["output"][0])
    for step in (0, 1):   # DDP's bucket, reduced: the same on both ranks
        assert bucket[step][0] == bucket[step][1] and bucket[step][0]["Max"] is not None



def _written_worker(rank: int, dump: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg = PrecisionDebugger(dump_path=dump, level="L1", step=[0])
    dbg.start()
    t = torch.full((4,), float(rank + 1))
    torch.mul(t, 1)                                   # Torch.mul.0: t seen before the call
    dist.all_reduce(tensor=t)                         # by keyword
    torch.mul(t, 1)                                   # Torch.mul.1: 3
    flat = torch.full((8,), float(rank + 1))
    view = flat[:4]                                   # a parameter's main_grad in a flat buffer
    torch.mul(view, 1)                                # Torch.mul.2
    dist.all_reduce(flat)
    torch.mul(view, 1)                                # Torch.mul.3: 3
    buf = torch.zeros(2)
    for i in range(3):                                # a receive buffer used again, by keyword and in a batch
        if rank == 0:
            dist.send(tensor=torch.full((2,), float(i + 1)), dst=1)
            dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((2,), float(i + 10)), 1)])[0].wait()
        else:
            dist.recv(tensor=buf, src=0)
            torch.mul(buf, 1)                         # Torch.mul.4 + 2i: i + 1
            dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, 0)])[0].wait()
            torch.mul(buf, 1)                         # Torch.mul.5 + 2i: i + 10
    dbg.stop()
    dbg.step()
    dbg.close()
    dist.destroy_process_group()


@pytest.mark.slow
def test_tensors_a_collective_writes_are_summarised_anew_by_keyword_in_a_batch_and_through_views(tmp_path):
    """The statistics of a tensor seen before a collective wrote it were reused after it when the tensor was
    given by keyword (Megatron's recv(tensor=buf), ZeRO's broadcast(tensor=...)), inside batch_isend_irecv's
    P2POps, or was a view of the buffer the collective wrote: the records after it held the values before."""
    dump = str(tmp_path / "dump")
    mp.spawn(_written_worker, args=(dump, free_port()), nprocs=2, join=True)
    for rank in (0, 1):
        with open(os.path.join(dump, "step0", f"rank{rank}", "dump.json")) as f:
            data = json.load(f)["data"]
        seen = [data[f"Torch.mul.{i}.forward"]["input_args"][0]["Max"] for i in range(4 if rank == 0 else 10)]
        want = [rank + 1, 3.0, rank + 1, 3.0] + ([] if rank == 0 else [1.0, 10.0, 2.0, 11.0, 3.0, 12.0])
        assert seen == want, rank
        assert data["Distributed.all_reduce.0.forward"]["output"][0]["Max"] == 3.0



def _receive_buffer_worker(rank: int, dump: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg = PrecisionDebugger(dump_path=dump, task="tensor", level="L1", step=[0])
    dbg.start()
    t = torch.full((3,), 5.0) if rank == 0 else torch.empty(3)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend if rank == 0 else dist.irecv, t, 1 - rank)]):
        work.wait()
    dbg.stop()
    dbg.step()
    dbg.close()
    dist.destroy_process_group()


@pytest.mark.slow
def test_an_irecv_buffer_in_a_batch_gets_no_tensor_file(tmp_path):
    """With task tensor, the irecv buffer's leftovers, null in the record's input, were still written to a file
    no record names."""
    dump = str(tmp_path / "dump")
    mp.spawn(_receive_buffer_worker, args=(dump, free_port()), nprocs=2, join=True)
    name = "Distributed.batch_isend_irecv.0.forward"
    for rank, want in ((0, [f"{name}.input.0.0.pt", f"{name}.output.0.0.pt"]), (1, [f"{name}.output.0.0.pt"])):
        rank_dir = os.path.join(dump, "step0", f"rank{rank}")
        assert sorted(os.listdir(os.path.join(rank_dir, "dump_tensor_data"))) == want, rank
        with open(os.path.join(rank_dir, "dump.json")) as f:
            (op,) = json.load(f)["data"][name]["input_args"][0]
        assert (op["tensor"] is None) == (rank == 1)


def _late_rank_worker(rank: int, dump: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.pop("RANK", None)                      # (mp.spawn sets none: nothing tells the rank before)
    config = os.path.join(os.path.dirname(dump), f"config{rank}.json")
    with open(config, "w") as f:
        json.dump({"task": "statistics", "dump_path": dump, "level": "L0", "step": [0, 1], "rank": [0]}, f)
    dbg = PrecisionDebugger(config_path=config)
    model = torch.nn.Linear(2, 2)
    for step in range(2):
        dbg.start(model=model)
        if step == 0:
            dist.init_process_group("gloo", rank=rank, world_size=2)   # inside the first collected step
        model(torch.ones(1, 2)).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_rank_the_filter_leaves_out_writes_nothing_when_its_rank_is_known_only_during_the_step(tmp_path):
    """Under mp.spawn with init_process_group after start(), rank 1 took itself for rank 0 at start() and its
    step went to a rank1 folder under `"rank": [0]`; the step is now dropped once the rank is known."""
    dump = str(tmp_path / "dump")
    mp.spawn(_late_rank_worker, args=(dump, free_port()), nprocs=2, join=True)
    for step in (0, 1):
        assert os.listdir(os.path.join(dump, f"step{step}")) == ["rank0"], step


@pytest.mark.slow
@pytest.mark.parametrize("level", ["L1", "mix"])
def test_two_ranks_record_what_msprobe_records(tmp_path, level):
    """DDP, the collectives (async ones after wait()), point to point, barrier and the *_object collectives: the
    same records on each rank, in the same order, as msprobe 26.2.0's."""
    need_peers()
    runs = {}
    for tool, python in (("tbprobe", sys.executable), ("msprobe", PEER_PYTHON)):
        out = subprocess.run([python, os.path.join(HERE, "dist_run.py"), tool, level, str(tmp_path / tool)],
                             capture_output=True, text=True, timeout=600, check=True).stdout
        runs[tool] = json.loads(out.strip().splitlines()[-1])
    assert sorted(runs["tbprobe"]) == ["rank0", "rank1"]
    assert runs["tbprobe"] == runs["msprobe"]
    assert "Distributed.all_gather.1.forward" in runs["tbprobe"]["rank0"]   # all_gather_object's own all_gather
    # and the same record layout: a destination buffer's input is null (its memory holds noise before the call),
    # the output is every argument as the call left it, keywords included
    for rank in ("rank0", "rank1"):
        dumps = {}
        for tool in ("tbprobe", "msprobe"):
            with open(tmp_path / tool / "step0" / rank / "dump.json") as f:
                dumps[tool] = {n: _layout(e) for n, e in json.load(f)["data"].items() if n.startswith("Distributed.")}
        assert dumps["tbprobe"] == dumps["msprobe"]
        # and every record's stack (mp.spawn's entry, `<string>`, has no source line: left out by both)
        stacks = {}
        for tool in ("tbprobe", "msprobe"):
            with open(tmp_path / tool / "step0" / rank / "stack.json") as f:
                stacks[tool] = stack_lines(json.load(f))
        assert len(stacks["tbprobe"]) > 20 and stacks["tbprobe"] == stacks["msprobe"]
    with open(tmp_path / "tbprobe" / "step0" / "rank1" / "dump.json") as f:
        recv = json.load(f)["data"]["Distributed.recv.0.forward"]
    assert recv["input_args"][0] is None and recv["output"][0]["type"] == "torch.Tensor"


def _layout(value):
    """A record with each item replaced by its type (None stays None)."""
    if isinstance(value, dict):
        return value.get("type") if "type" in value else {k: _layout(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_layout(v) for v in value]
    return value


def _gloo_mesh(rank: int, port: int):
    """This process as one of two gloo ranks, with their one-dimensional CPU device mesh."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    return init_device_mesh("cpu", (2,))


def _fsdp_worker(rank: int, dump: str, port: int, level: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    from tbprobe import PrecisionDebugger

    mesh = _gloo_mesh(rank, port)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = PrecisionDebugger(dump_path=dump, level=level, step=[0])
    dbg.start(model=model)
    weight = model[0].weight.to_local().detach().clone()    # this rank's shard, as the forward sees it
    model(torch.randn(3, 4) + rank).sum().backward()
    opt.step()
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(dump, f"expected{rank}.json"), "w") as f:
        json.dump({"shape": list(weight.shape), "max": weight.max().item(), "errors": dbg.hook_errors}, f)
    dist.destroy_process_group()


def _tp_worker(rank: int, dump: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from tbprobe import PrecisionDebugger

    mesh = _gloo_mesh(rank, port)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    dbg = PrecisionDebugger(dump_path=dump, level="mix", step=[0])
    dbg.start(model=model)
    model(torch.randn(3, 4)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(dump, f"expected{rank}.json"), "w") as f:
        json.dump({"w0": model[0].weight.to_local().max().item(), "w2_shape": list(model[2].weight.to_local().shape),
                   "errors": dbg.hook_errors}, f)
    dist.destroy_process_group()


@pytest.mark.slow
def test_tensor_parallel_dtensors_are_each_rank_s_shard_with_mesh_and_placements(tmp_path):
    """parallelize_module's DTensors: each rank's local shard summarised, under the DTensor's type, device mesh
    and placements, as msprobe writes them (checked against its dump of the same run: tbprobe wrote a plain
    torch.Tensor item)."""
    dump = str(tmp_path / "dump")
    os.makedirs(dump)
    mp.spawn(_tp_worker, args=(dump, free_port()), nprocs=2, join=True)
    for rank in (0, 1):
        with open(os.path.join(dump, f"expected{rank}.json")) as f:
            want = json.load(f)
        assert want["errors"] == 0
        with open(os.path.join(dump, "step0", f"rank{rank}", "dump.json")) as f:
            data = json.load(f)["data"]
        first = data["Functional.linear.0.forward"]["input_args"]
        assert first[1]["type"] == "torch.distributed.tensor.DTensor" and first[1]["shape"] == [4, 4]
        assert first[1]["device_mesh"] == [0, 1] and first[1]["placements"] == [{"Shard": {"dim": 0}}]
        assert first[1]["Max"] == want["w0"]
        assert first[0]["placements"] == [{"Replicate": {}}]
        second = data["Functional.linear.1.forward"]["input_args"][1]
        assert second["shape"] == want["w2_shape"] == [4, 4] and second["placements"] == [{"Shard": {"dim": 1}}]
        weight = data["Module.0.Linear.forward.0"]["parameters"]["weight"]
        assert list(weight)[:8] == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"]
        assert list(weight)[8:10] == ["device_mesh", "placements"]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_fsdp2_parameters_are_summarised_as_each_rank_s_shard(tmp_path, level):
    """FSDP2 (fully_shard) keeps parameters as DTensors: each rank records its own shard (shape and statistics of
    the local tensor), as the reference summarises a DTensor's local shard."""
    dump = str(tmp_path / "dump")
    os.makedirs(dump)
    mp.spawn(_fsdp_worker, args=(dump, free_port(), level), nprocs=2, join=True)
    maxes = []
    for rank in (0, 1):
        with open(os.path.join(dump, f"expected{rank}.json")) as f:
            want = json.load(f)
        assert want["errors"] == 0 and want["shape"] == [4, 4]            # half of Linear(4, 8)'s [8, 4] weight
        with open(os.path.join(dump, "step0", f"rank{rank}", "dump.json")) as f:
            data = json.load(f)["data"]
        names = [n for n in data if n.startswith("Module.0.")]
        assert names[0] == "Module.0.FSDPLinear.forward.0" and "Module.0.FSDPLinear.parameters_grad.0" in names
        item = data["Module.0.FSDPLinear.forward.0"]["parameters"]["weight"]
        assert item["shape"] == want["shape"] and item["Max"] == want["max"]
        # a DTensor's item names its type, mesh and placements, as the reference writes them
        assert item["type"] == "torch.distributed.tensor.DTensor"
        assert item["device_mesh"] == [0, 1] and item["placements"] == [{"Shard": {"dim": 0}}]
        assert data["Module.0.FSDPLinear.parameters_grad.0"]["weight"][0]["shape"] == [4, 4]
        maxes.append(item["Max"])
    assert maxes[0] != maxes[1]                      # two shards, not the whole weight twice
