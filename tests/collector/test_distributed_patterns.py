"""Distributed training patterns on CPU gloo (dist_patterns_run.py): asynchronous calls waited late, in the next step
or never; the collectives beyond all_reduce (torch 2.13's all_gather_single and reduce_scatter_single too); subgroups
of four ranks; DTensor and tensor parallel, FSDP2 at L0 and L1 and DDP with unused parameters and no_sync, each
bitwise against the plain run; the rank filter with the rank known late and the process group destroyed mid-run.
(test_distributed.py has the rest: sync point to point, async waited by future or poll, DDP's comm hook, the names
against msprobe's, DTensor items' mesh and placements.)"""
import json
import os

import pytest
from conftest import launch_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "dist_patterns_run.py")
SCRIPT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"

pytestmark = pytest.mark.slow


def _launch(out, args, ranks=(0, 1)):
    procs = launch_ranks(SCRIPT, [RUN, str(out), *args], out, ranks=ranks)
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "Traceback" not in err, err
        errs.append(err)
    return errs


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """One two-rank job running every two-rank scenario in turn: (OUT, stderr per rank)."""
    out = tmp_path_factory.mktemp("patterns")
    return out, _launch(out, ["async", "collectives", "dtensor", "fsdp", "ddp", "filter"])


def _data(out, scenario, step, rank):
    with open(os.path.join(out, scenario, "dump", f"step{step}", f"rank{rank}", "dump.json")) as f:
        return json.load(f)["data"]


def _result(out, scenario, rank):
    with open(os.path.join(out, scenario, f"rank{rank}.json")) as f:
        return json.load(f)


def _dist(data):
    return [n for n in data if n.startswith("Distributed.")]


def _max(item):
    return item["Max"]


def test_asynchronous_calls_are_recorded_once_after_their_wait_in_their_own_step(two):
    """A reduce_scatter waited for after stop() but before step() was dropped as 'not waited for' (wait() was
    unwrapped at stop(), and gloo's handle never says it completed); one waited in the next step belongs to
    neither step; a handle never waited for is recorded once it completed; isend/irecv and batch_isend_irecv hold
    the received values."""
    out, errs = two
    for rank in (0, 1):
        peer = 1 - rank
        res = _result(out, "async", rank)
        assert res["errors"] == 0 and res["wait_restored"]
        assert res["late"] == [3.0] and res["held"] == [3.0]
        data = _data(out, "async", 0, rank)
        assert sorted(_dist(data)) == sorted([
            "Distributed.all_reduce.0.forward", "Distributed.isend.0.forward", "Distributed.irecv.0.forward",
            "Distributed.all_reduce.1.forward", "Distributed.batch_isend_irecv.0.forward",
            "Distributed.reduce_scatter_tensor.1.forward"])
        names = list(data)
        # recorded once it completed: by its wait() at the latest, so ahead of the call after the wait (before or
        # after the compute between the call and the wait, as gloo finished it sooner or later)
        assert names.index("Distributed.all_reduce.0.forward") < names.index("Torch.mul.1.forward")
        assert _max(data["Distributed.all_reduce.0.forward"]["input_args"][0]) == rank + 1
        assert _max(data["Distributed.all_reduce.0.forward"]["output"][0]) == 3.0
        assert _max(data["Torch.mul.1.forward"]["input_args"][0]) == 3.0
        assert _max(data["Distributed.all_reduce.1.forward"]["output"][0]) == 30.0     # never waited for
        sent = 7.0 if rank == 0 else 9.0
        assert _max(data["Distributed.isend.0.forward"]["input_args"][0]) == sent
        assert data["Distributed.isend.0.forward"]["output"][0] is None
        irecv = data["Distributed.irecv.0.forward"]
        assert irecv["input_args"][0] is None and _max(irecv["output"][0]) == res["recv"][0] == 16.0 - sent
        batch = data["Distributed.batch_isend_irecv.0.forward"]
        assert [op["op"] for op in batch["input_args"][0]] == ["isend", "irecv"]
        assert batch["input_args"][0][1]["tensor"] is None
        assert _max(batch["output"][0][1]["tensor"]) == 20.0 + peer == res["back"][0]
        late = data["Distributed.reduce_scatter_tensor.1.forward"]          # waited after stop()
        assert late["input_args"][0] is None and late["output"][0]["Max"] == 3.0
        # step 1: the handle of step 0 waited here is no record of either step; the counters start again
        data = _data(out, "async", 1, rank)
        assert _dist(data) == ["Distributed.all_reduce.0.forward"]
        assert _max(data["Distributed.all_reduce.0.forward"]["output"][0]) == 3.0
        assert _max(data["Torch.mul.0.forward"]["input_args"][0]) == 3.0
        # (said once, by name)
        assert errs[rank].count("not complete when its step ended") == 1
        assert "Distributed.reduce_scatter_tensor.0.forward was not complete" in errs[rank]


COLLECTIVES = ["broadcast.0", "all_gather.0", "all_gather_into_tensor.0", "all_gather_single.0",
               "reduce_scatter_tensor.0", "reduce_scatter_single.0", "reduce_scatter.0", "reduce.0",
               "all_to_all_single.0", "all_to_all.0", "gather.0", "scatter.0", "all_gather_single.1"]


def test_collectives_beyond_all_reduce_each_with_its_result(two):
    """Each collective gloo runs, in call order, its destination's input null and its output as the call left it;
    barrier is not recorded (nor by the reference). all_gather_single and reduce_scatter_single (torch 2.13's
    names, which the deprecated all_gather_into_tensor and reduce_scatter_tensor call) were not recorded."""
    out, _ = two
    for rank in (0, 1):
        assert _result(out, "collectives", rank)["errors"] == 0
        data = _data(out, "collectives", 0, rank)
        assert _dist(data) == [f"Distributed.{n}.forward" for n in COLLECTIVES]
        rec = {n: data[f"Distributed.{n}.forward"] for n in COLLECTIVES}
        assert _max(rec["broadcast.0"]["input_args"][0]) == rank + 1 and _max(rec["broadcast.0"]["output"][0]) == 1
        assert [_max(t) for t in rec["all_gather.0"]["output"][0]] == [0.0, 1.0]
        for name, lo, hi in (("all_gather_into_tensor.0", 0, 1), ("all_gather_single.0", 5, 6),
                             ("all_gather_single.1", 1, 2)):
            assert rec[name]["input_args"][0] is None, name
            o = rec[name]["output"][0]
            assert (o["shape"], o["Min"], o["Max"]) == ([4], lo, hi), name
        for name in ("reduce_scatter_tensor.0", "reduce_scatter_single.0"):
            # rank j gets the sum over the ranks of (j + rank)
            assert rec[name]["input_args"][0] is None and _max(rec[name]["output"][0]) == 2 * rank + 1, name
        assert _max(rec["reduce_scatter.0"]["output"][0]) == 3.0
        if rank == 0:
            assert _max(rec["reduce.0"]["output"][0]) == 3.0
            assert [_max(t) for t in rec["gather.0"]["output"][1]] == [0.0, 1.0]
        o = rec["all_to_all_single.0"]["output"][0]
        assert (o["Min"], o["Max"]) == (rank, rank + 10)
        assert [_max(t) for t in rec["all_to_all.0"]["output"][0]] == [0.0, 1.0]
        assert _max(rec["scatter.0"]["output"][0]) == rank


def test_subgroups_of_four_ranks_name_their_group_and_reduce_within_it(tmp_path):
    """Four ranks, tensor-parallel pairs [0, 1] [2, 3] and data-parallel pairs [0, 2] [1, 3]: each call names its
    group's ranks and the id both members give it, and its result is the group's."""
    _launch(tmp_path, ["subgroups"], ranks=(0, 1, 2, 3))
    ids = {}
    for rank in range(4):
        assert _result(tmp_path, "subgroups", rank)["errors"] == 0
        data = _data(tmp_path, "subgroups", 0, rank)
        p2p = "Distributed.send.0.forward" if rank % 2 == 0 else "Distributed.recv.0.forward"
        assert _dist(data) == ["Distributed.all_reduce.0.forward", "Distributed.broadcast.0.forward",
                               "Distributed.all_reduce.1.forward", p2p]
        tp = [0, 1] if rank < 2 else [2, 3]
        dp = [0, 2] if rank % 2 == 0 else [1, 3]
        ar = data["Distributed.all_reduce.0.forward"]
        group = ar["input_kwargs"]["group"]
        assert group["type"] == "torch.ProcessGroup" and group["group_ranks"] == tp
        ids.setdefault(tuple(tp), set()).add(group["group_id"])
        assert _max(ar["output"][0]) == sum(r + 1 for r in tp)
        bc = data["Distributed.broadcast.0.forward"]
        assert bc["input_kwargs"]["src"]["value"] == tp[1] and _max(bc["output"][0]) == tp[1] + 1
        ar = data["Distributed.all_reduce.1.forward"]
        assert ar["input_kwargs"]["group"]["group_ranks"] == dp
        ids.setdefault(tuple(dp), set()).add(ar["input_kwargs"]["group"]["group_id"])
        assert _max(ar["output"][0]) == sum(r + 1 for r in dp)
        if rank % 2:
            assert _max(data[p2p]["output"][0]) == rank - 1
    assert all(len(v) == 1 for v in ids.values()) and len({next(iter(v)) for v in ids.values()}) == 4


def test_dtensor_and_tensor_parallel_train_bitwise_alike_and_record_local_shards(two):
    out, _ = two
    for rank in (0, 1):
        res = _result(out, "dtensor", rank)
        assert res["errors"] == 0 and res["losses"][0] == res["losses"][1]
        assert res["same_params"] and res["same_tensors"]
        for step in (0, 1):
            assert "Module.0.Linear.forward.0" in _data(out, "dtensor", step, rank)
        data = _data(out, "dtensor", 2, rank)
        mul = data["Torch.mul.0.forward"]
        x, y = mul["input_args"][0], mul["output"][0]
        assert x["type"] == "torch.distributed.tensor.DTensor" and x["shape"] == [2, 2]    # this rank's half
        assert (x["Min"], x["Max"]) == (4.0 * rank, 4.0 * rank + 3) and y["Max"] == res["local_max"][0]
        assert x["placements"] == [{"Shard": {"dim": 0}}]
        total = data["Tensor.sum.0.forward"]
        assert total["input_args"][0]["shape"] == [4, 2] and total["input_args"][0]["placements"] == [{"Replicate": {}}]
        assert total["output"][0]["Max"] == res["local_max"][2] == 56.0
        assert data["Torch.exp.0.forward"]["output"][0]["Max"] == res["local_max"][3]


def test_fsdp2_trains_bitwise_alike_at_l0_and_l1_and_records_its_all_gathers_and_reduce_scatters(two):
    """FSDP2 calls torch 2.13's all_gather_single and reduce_scatter_single: at L1 its steps had no collective."""
    out, _ = two
    gathered = {}
    for rank in (0, 1):
        res = _result(out, "fsdp_L0", rank)
        for level in ("L0", "L1"):
            assert res[level]["errors"] == 0, level
            assert res[level]["losses"] == res["plain"] and res[level]["same_params"], level
        for step in (0, 1):
            assert "Module.0.FSDPLinear.forward.0" in _data(out, "fsdp_L0", step, rank)
            data = _data(out, "fsdp_L1", step, rank)
            names = _dist(data)
            ag = [n for n in names if n.startswith("Distributed.all_gather_single.")]
            rs = [n for n in names if n.startswith("Distributed.reduce_scatter_single.")]
            assert len(ag) >= 2 and len(rs) >= 2, names
            for n in ag:
                shard, full = data[n]["input_args"][1], data[n]["output"][0]
                assert data[n]["input_args"][0] is None and full["shape"] == [2 * shard["shape"][0]]
                gathered.setdefault((step, n), []).append(full)
            for n in rs:
                entry = data[n]
                assert entry["input_kwargs"]["output"] is None
                assert entry["output"][0]["shape"] == [entry["input_kwargs"]["input"]["shape"][0] // 2]
    for key, items in gathered.items():   # every rank gathers the same whole parameters
        assert len(items) == 2 and items[0] == items[1], key


def test_ddp_with_unused_parameters_and_no_sync_trains_bitwise_alike(two):
    """find_unused_parameters, buckets of a parameter or so, the first of two micro-batches under no_sync(): each
    micro-batch's forward and parameter gradients recorded, the module the step skips not at all. The gradient
    DDP reduces goes through the reducer in C++, not torch.distributed: no Distributed record, as in the
    reference. parameters_grad is the rank's own gradient as autograd accumulated it, before DDP averages it
    (the reference reads it at the same point)."""
    out, _ = two
    for rank in (0, 1):
        res = _result(out, "ddp", rank)
        assert res["errors"] == 0 and res["losses"][0] == res["losses"][1] and res["same_params"]
        for step, live, idle in ((0, "b", "c"), (1, "c", "b")):
            data = _data(out, "ddp", step, rank)
            assert not _dist(data)
            for i in (0, 1):
                assert f"Module.module.{live}.Linear.forward.{i}" in data
                assert f"Module.module.a.Linear.parameters_grad.{i}" in data
                assert f"Module.module.{live}.Linear.parameters_grad.{i}" in data
            assert not [n for n in data if f".{idle}." in n or ".unused." in n]
        # the no_sync micro-batch's gradient is the rank's own, as the rank saw it: in step 0 (b) and in step 1 (c,
        # which runs after a step it was unused in); Max is the signed maximum
        for step, live in ((0, "b"), (1, "c")):
            grad = _data(out, "ddp", step, rank)[f"Module.module.{live}.Linear.parameters_grad.0"]["weight"][0]
            assert grad["Max"] == pytest.approx(res["grad_max"][str(step)][0], abs=0, rel=1e-7)


def test_the_rank_filter_writes_only_the_ranks_it_names(two):
    out, _ = two
    for step in (0, 1):
        assert os.listdir(os.path.join(out, "filter", "dump", f"step{step}")) == ["rank1"]
        assert "Distributed.all_reduce.0.forward" in _data(out, "filter", step, 1)
    assert _result(out, "filter", 0)["errors"] == _result(out, "filter", 1)["errors"] == 0


@pytest.mark.parametrize("mode", ["after_ctor", "after_start", "after_step0"])
def test_a_rank_known_late_keeps_its_folder_and_filter_through_destroy_process_group(tmp_path, mode):
    """`"rank": [1]`, no RANK variable: with init_process_group inside the first collected step, rank 1 took
    itself for rank 0 at start() and its step 0 was never collected. With init_process_group after the first
    step (which ends with the rank unknown, so it is written by no one), the steps after it are rank 1's: a first
    step that ended with a guess must not switch the collector off. destroy_process_group() inside step 1: steps
    1 to 3 are still rank1's."""
    _launch(tmp_path, ["late", mode])
    first = 1 if mode == "after_step0" else 0
    assert not os.path.exists(tmp_path / "late" / "dump" / "step0" / "rank1") or first == 0
    for step in range(first, 4):
        assert os.listdir(tmp_path / "late" / "dump" / f"step{step}") == ["rank1"], step
        data = _data(tmp_path, "late", step, 1)
        assert "Functional.linear.0.forward" in data and "Functional.linear.0.backward" in data
        assert ("Distributed.all_reduce.0.forward" in data) == (first <= step < 2)
    assert _result(tmp_path, "late", 0)["errors"] == _result(tmp_path, "late", 1)["errors"] == 0
