"""Pipeline parallelism on two gloo ranks (pipeline_run.py): a model split into two stages, 1F1B over three
micro-batches by isend/irecv, send/recv and batch_isend_irecv, three optimizer steps; run with no tool, under
tbprobe and under msprobe (the peers' python) at mix. The collected run trains bitwise as the plain one; each rank's
dump holds its own stage's modules; the point-to-point records are msprobe's names and hold the tensors the other
rank sent; `tbprobe graph` builds each rank and matches every node of tbprobe's rank dump to msprobe's. The same
stages under torch.distributed.pipelining's Schedule1F1B; the model in four stages, two chunks a rank given to
start(model=[...]) as a list, under its ScheduleInterleaved1F1B; a batch_isend_irecv whose handle list the caller
empties (torch's send_object_list, which pipelining uses), and an isend or irecv waited late."""
import glob
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import PEER_PYTHON, free_port, need_peers, stack_lines, vis_nodes

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "pipeline_run.py")
STEPS, RANKS = range(3), (0, 1)
MICRO, INTERLEAVED_MICRO = 3, 4      # (pipeline_run.py's MICRO_OF)
P2P = ("Distributed.isend.", "Distributed.irecv.", "Distributed.send.", "Distributed.recv.",
       "Distributed.batch_isend_irecv.")

pytestmark = pytest.mark.slow


def _runs(tmp_path_factory, schedule: str) -> dict:
    """{tool: OUT} of the plain, tbprobe and (peers installed) msprobe runs of `schedule`, one after the other, each
    rank a process of its own."""
    tools = {"plain": sys.executable, "tbprobe": sys.executable}
    if os.path.exists(PEER_PYTHON):
        tools["msprobe"] = PEER_PYTHON
    outs = {}
    for tool, python in tools.items():
        out = outs[tool] = str(tmp_path_factory.mktemp(f"{schedule}_{tool}"))
        port = free_port()
        procs = [subprocess.Popen([python, RUN, tool, "mix", out, schedule], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, RANK=str(rank), MASTER_PORT=str(port)))
                 for rank in RANKS]
        errs = []
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, (tool, err[-3000:])
            errs.append(err)
        with open(os.path.join(out, "stderr.txt"), "w") as f:
            f.write("".join(errs))
    return outs


@pytest.fixture(scope="module")
def hand_runs(tmp_path_factory):
    return _runs(tmp_path_factory, "hand")


@pytest.fixture(scope="module")
def plain(hand_runs):
    return hand_runs["plain"]


@pytest.fixture(scope="module")
def ours(hand_runs):
    return hand_runs["tbprobe"]


@pytest.fixture(scope="module")
def theirs(hand_runs):
    need_peers()
    return hand_runs["msprobe"]


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    """torch.distributed.pipelining's Schedule1F1B: {tool: OUT}."""
    return _runs(tmp_path_factory, "torch")


@pytest.fixture(scope="module")
def torch_theirs(torch_runs):
    need_peers()
    return torch_runs["msprobe"]


@pytest.fixture(scope="module")
def interleaved_runs(tmp_path_factory):
    """Four stages, two chunks a rank, under pipelining's ScheduleInterleaved1F1B: {tool: OUT}."""
    return _runs(tmp_path_factory, "interleaved")


@pytest.fixture(scope="module")
def interleaved_theirs(interleaved_runs):
    need_peers()
    return interleaved_runs["msprobe"]


def _result(out: str, rank: int) -> dict:
    with open(os.path.join(out, f"rank{rank}.json")) as f:
        return json.load(f)


def _rank_dir(out: str, step: int, rank: int) -> str:
    return os.path.join(out, "dump", f"step{step}", f"rank{rank}")


def _same_stacks(ours: str, theirs: str, step: int, rank: int) -> None:
    mine, ref = (stack_lines(_load(out, step, rank, "stack")) for out in (ours, theirs))
    assert len(mine) > 10 and mine.keys() == ref.keys(), (step, rank)
    differ = sorted(n for n in mine if mine[n] != ref[n])
    assert not differ, (step, rank, differ[:3], mine[differ[0]], ref[differ[0]])


def _load(out: str, step: int, rank: int, name: str) -> dict:
    with open(os.path.join(_rank_dir(out, step, rank), f"{name}.json")) as f:
        doc = json.load(f)
    return doc["data"] if name == "dump" else doc


def _module_path(name: str) -> str:
    """'layers.2.fc1' of 'Module.layers.2.fc1.Linear.forward.0' and of 'Module.layers.2.fc1.Linear.parameters_grad[.N]'."""
    parts = name.split(".")[1:]
    if parts[-1].isdigit() and parts[-2] == "parameters_grad":
        parts = parts[:-1]
    return ".".join(parts[:-2] if parts[-1] == "parameters_grad" else parts[:-3])


def _same_training(ours: str, plain: str, micro: int = MICRO) -> None:
    """The collected run's losses (`micro` a step, on the last stage's rank), sent tensors and final weights are
    the plain run's, bit for bit, with no hook error nor a call left unrecorded."""
    with open(os.path.join(ours, "stderr.txt")) as f:
        assert "not complete" not in f.read()
    for rank in RANKS:
        got, want = _result(ours, rank), _result(plain, rank)
        assert got["errors"] == 0
        assert got["losses"] == want["losses"] and len(want["losses"]) == (len(STEPS) * micro if rank == 1 else 0)
        assert got["sent"] == want["sent"]
        weights, plain_weights = (torch.load(os.path.join(o, f"weights{rank}.pt")) for o in (ours, plain))
        assert list(weights) == list(plain_weights) and len(weights) >= 13
        for key, value in plain_weights.items():
            assert torch.equal(weights[key], value), (rank, key)


def _own_stage_only(out: str) -> None:
    """The modules in each rank's dump.json and construct.json are those whose parameters the rank's stage holds
    (its weights file says which), every one of them, and none of the other stage's; each rank in its folder."""
    params = {rank: list(torch.load(os.path.join(out, f"weights{rank}.pt"))) for rank in RANKS}
    owners = {rank: {k.rsplit(".", 1)[0] for k in keys} for rank, keys in params.items()}
    assert owners[0] & owners[1] == set()
    for step in STEPS:
        assert sorted(os.listdir(os.path.join(out, "dump", f"step{step}"))) == ["rank0", "rank1"]
        for rank in RANKS:
            for doc in ("dump", "construct"):
                paths = {_module_path(n) for n in _load(out, step, rank, doc) if n.startswith("Module.")}
                # (a Block holds no parameter of its own: it is the prefix of its layers')
                assert all(any(k.startswith(p + ".") for k in params[rank]) for p in paths), (step, rank, doc)
                assert owners[rank] <= paths, (step, rank, doc)
                assert not paths & owners[1 - rank]


def test_collected_pipeline_trains_bitwise_as_the_plain_run(plain, ours):
    _same_training(ours, plain)


def test_each_rank_dumps_its_own_stage_in_its_own_folder(ours):
    _own_stage_only(ours)


def _received(record: dict, name: str) -> list:
    """The tensors a P2P record says were received, in call order: recv's and irecv's output, a batch's irecv."""
    if name.startswith(("Distributed.recv.", "Distributed.irecv.")):
        return [record["output"][0]]
    if name.startswith("Distributed.batch_isend_irecv."):
        return [op["tensor"] for op in record["output"][0] if op["op"] == "irecv"]
    return []


def _sent(record: dict, name: str) -> list:
    if name.startswith(("Distributed.send.", "Distributed.isend.")):
        return [record["input_args"][0]]
    if name.startswith("Distributed.batch_isend_irecv."):
        return [op["tensor"] for op in record["input_args"][0] if op["op"] == "isend"]
    return []


def _summary(item: dict) -> dict:
    return {"shape": item["shape"], "Max": item["Max"], "Min": item["Min"]}


def test_p2p_records_hold_what_the_other_rank_sent(ours):
    """The receives, asynchronous ones recorded after their wait(), hold the values the other rank sent (its
    tensors' statistics, read there); the sends the values this rank sent; a receive's destination buffer before
    the call is null."""
    want = {0: ["Distributed.isend.0.forward", "Distributed.batch_isend_irecv.0.forward",
                "Distributed.batch_isend_irecv.1.forward", "Distributed.recv.0.forward"],
            1: ["Distributed.irecv.0.forward", "Distributed.batch_isend_irecv.0.forward",
                "Distributed.batch_isend_irecv.1.forward", "Distributed.send.0.forward"]}
    for step in STEPS:
        for rank in RANKS:
            data = _load(ours, step, rank, "dump")
            names = [n for n in data if n.startswith("Distributed.")]
            assert names == want[rank], (step, rank)
            received = [_summary(t) for n in names for t in _received(data[n], n)]
            sent = [_summary(t) for n in names for t in _sent(data[n], n)]
            assert received == _result(ours, 1 - rank)["sent"][step], (step, rank)
            assert sent == _result(ours, rank)["sent"][step], (step, rank)
            for n in names:
                if n.startswith(("Distributed.recv.", "Distributed.irecv.")):
                    assert data[n]["input_args"][0] is None, n
                if n.startswith("Distributed.batch_isend_irecv."):
                    assert [op["tensor"] for op in data[n]["input_args"][0] if op["op"] == "irecv"] == [None]


def test_dump_names_and_nodes_are_msprobes(ours, theirs):
    """msprobe's dump of the same run has the same records in the same order and the same construct.json nodes.
    Parents differ where docs/compatibility.md says ("Parents of backward nodes"): msprobe leaves the embedding's
    backward call at the top level (the Embedding's backward hook has fired already, its input needing no
    gradient); tbprobe hangs it under the Embedding's backward."""
    for step in STEPS:
        for rank in RANKS:
            assert list(_load(ours, step, rank, "dump")) == list(_load(theirs, step, rank, "dump")), (step, rank)
            mine, ref = _load(ours, step, rank, "construct"), _load(theirs, step, rank, "construct")
            assert set(mine) == set(ref)
            apart = {n for n in mine if mine[n] != ref[n]}
            assert apart == ({f"Functional.embedding.{i}.backward" for i in range(3)} if rank == 0 else set())
            _parents_apart_at_embedding_backward(mine, ref, apart)
            _same_stacks(ours, theirs, step, rank)


def _vis_db(folder) -> str:
    (db,) = glob.glob(os.path.join(folder, "*.vis.db"))
    return db


def _nodes(folder) -> dict:
    """{node name: (precision_index, matched_node_link)} of the debug side of the one .vis.db in `folder`."""
    return {name: (index, json.loads(link))
            for name, (index, link) in vis_nodes(_vis_db(folder), ("precision_index", "matched_node_link")).items()}


def _parents(folder) -> dict:
    """{node name: its parent's name} of the debug side of the one .vis.db in `folder`."""
    return {name: up for name, (up,) in vis_nodes(_vis_db(folder), ("up_node",)).items()}


def _build_and_compare(ours_dir: str, theirs_dir: str, out, groups_renumbered: bool = False) -> tuple:
    """`tbprobe graph` of tbprobe's rank dump alone (every record a node), then compared with msprobe's: the same
    nodes, each matched to its namesake; with `groups_renumbered`, a group of top-level calls to a group of
    another number (they are numbered in order, and an extra one on msprobe's side shifts the later ones). The
    compare's nodes and its folder."""
    from tbprobe.cli import main

    built, compared = out / "build", out / "compare"
    assert main(["graph", "-tp", ours_dir, "-o", str(built), "-q"]) == 0
    names = set(_nodes(built))
    with open(os.path.join(ours_dir, "dump.json")) as f:
        assert set(json.load(f)["data"]) <= names
    assert main(["graph", "-tp", ours_dir, "-gp", theirs_dir, "-o", str(compared), "-q"]) == 0
    nodes = _nodes(compared)
    assert set(nodes) == names
    group = "Apis_Between_Modules."
    assert [n for n, (_, link) in nodes.items() if not link or link[-1] != n and not (
        groups_renumbered and n.startswith(group) and link[-1].startswith(group))] == []
    return nodes, compared


def _receive_view(out: str, rank: int, name: str, step: int = 0) -> tuple:
    """What the step's record `name` on `rank` says of its receives: the received tensors, and a batch's irecv
    buffers before the call."""
    record = _load(out, step, rank, "dump")[name]
    before = [op["tensor"] and _summary(op["tensor"]) for op in record["input_args"][0] if op["op"] == "irecv"] \
        if name.startswith("Distributed.batch_isend_irecv.") else []
    return [_summary(t) for t in _received(record, name)], before


def _ours_right_theirs_not(ours: str, theirs: str, step: int, rank: int, name: str, sent: list) -> None:
    """A receive graded apart holds what the other rank sent (`sent`) in tbprobe's record, nothing in a batch's
    irecv buffers before the call, and msprobe's record says otherwise."""
    got, before = _receive_view(ours, rank, name, step)
    assert got and all(t in sent for t in got) and not any(before), name
    assert _receive_view(theirs, rank, name, step) != (got, before), name


def _parents_apart_at_embedding_backward(mine: dict, ref: dict, apart: set) -> None:
    """Each construct.json parent apart is an embedding's backward call: at the top level in msprobe's, under the
    Embedding's backward in tbprobe's ("Parents of backward nodes")."""
    for n in apart:
        forward_parent = mine[n.replace(".backward", ".forward")]
        assert ref[n] is None and mine[n] == forward_parent.replace(".forward.", ".backward.")


def test_tbprobe_graph_builds_each_rank_and_matches_every_node_to_msprobes(ours, theirs, tmp_path):
    """Every node of tbprobe's rank dump matched in msprobe's. The nodes the compare grades apart are receives
    whose msprobe record is not what the other rank sent (msprobe's batch irecv tensors are read from the buffer
    before the receive: on rank 0 the output too; its irecv's record is overwritten by the irecvs that
    batch_isend_irecv makes through its wrapped dist.irecv), where tbprobe's is."""
    for rank in RANKS:
        nodes, _ = _build_and_compare(_rank_dir(ours, 0, rank), _rank_dir(theirs, 0, rank), tmp_path / f"r{rank}")
        apart = [n for n, (index, _) in nodes.items() if index]
        assert apart and all(n.startswith(P2P) for n in apart), apart
        sent = _result(ours, 1 - rank)["sent"][0]
        for n in apart:
            _ours_right_theirs_not(ours, theirs, 0, rank, n, sent)


def _p2p_tensors(out: str, step: int, rank: int, which) -> list:
    """The (shape, Max, Min) of the tensors `which` (_sent or _received) finds in the rank's P2P records, sorted."""
    data = _load(out, step, rank, "dump")
    return sorted((tuple(t["shape"]), t["Max"], t["Min"]) for n in data if n.startswith(P2P)
                  for t in which(data[n], n))


def test_torch_pipelining_1f1b_trains_bitwise_and_each_rank_records_its_stage(torch_runs):
    """torch.distributed.pipelining (PipelineStage, Schedule1F1B) on the same stages: bitwise the plain run, each
    rank's own modules, and every tensor a rank received (its sends waited by the schedule at the end of the
    step, its metadata exchanged through send_object_list in the first) holds what the other rank sent."""
    ours, plain = torch_runs["tbprobe"], torch_runs["plain"]
    _same_training(ours, plain)
    _own_stage_only(ours)
    for step in STEPS:
        for rank in RANKS:
            names = [n for n in _load(ours, step, rank, "dump") if n.startswith("Distributed.")]
            assert {"Distributed.isend.0.forward", "Distributed.irecv.0.forward"} <= set(names), (step, rank)
            received = _p2p_tensors(ours, step, rank, _received)
            assert received and received == _p2p_tensors(ours, step, 1 - rank, _sent), (step, rank)


def test_torch_pipelining_records_are_msprobes(torch_runs, torch_theirs):
    """The same records as msprobe's, in its order, but for an isend or irecv after a batch_isend_irecv in steps 1
    and 2: msprobe lists it earlier, where the batch's own isend or irecv (made through msprobe's wrapped dist.irecv,
    counted under the same name) put its key; tbprobe where it was called (both tools' stacks say where)."""
    ours = torch_runs["tbprobe"]
    for step in STEPS:
        for rank in RANKS:
            mine, ref = list(_load(ours, step, rank, "dump")), list(_load(torch_theirs, step, rank, "dump"))
            assert sorted(mine) == sorted(ref), (step, rank)
            calls = {n for n in mine if n.startswith("Distributed.")}
            assert [n for n in mine if n not in calls] == [n for n in ref if n not in calls]
            # (where a call is: after how many of the other records)
            assert all(_after(mine, n, calls) >= _after(ref, n, calls) for n in calls), (step, rank)
            moved = [n for n in calls if _after(mine, n, calls) > _after(ref, n, calls)]
            assert all(n.startswith(("Distributed.isend.", "Distributed.irecv.")) for n in moved), moved
            _same_stacks(ours, torch_theirs, step, rank)


def _after(names: list, name: str, calls: set) -> int:
    return sum(1 for n in names[:names.index(name)] if n not in calls)


def test_interleaved_pipeline_trains_bitwise_and_each_rank_records_its_two_chunks(interleaved_runs):
    """ScheduleInterleaved1F1B over four stages, rank 0 holding stages 0 and 2 and rank 1 stages 1 and 3, each
    rank's two chunks given to start(model=[...]): bitwise the plain run; each rank's dump holds the modules of its
    own chunks, named `Module.<chunk>.<path>` (its weights file keys them so), both chunks', and none of the other
    rank's; every tensor a rank received holds what the other rank sent."""
    ours, plain = interleaved_runs["tbprobe"], interleaved_runs["plain"]
    _same_training(ours, plain, INTERLEAVED_MICRO)
    _own_stage_only(ours)
    for rank in RANKS:
        chunks = {k.split(".")[0] for k in torch.load(os.path.join(ours, f"weights{rank}.pt"))}
        assert chunks == {"0", "1"}
        for step in STEPS:
            modules = {n.split(".")[1] for n in _load(ours, step, rank, "dump") if n.startswith("Module.")}
            assert modules == chunks, (step, rank)
            received = _p2p_tensors(ours, step, rank, _received)
            assert received and received == _p2p_tensors(ours, step, 1 - rank, _sent), (step, rank)


def test_interleaved_pipeline_records_are_msprobes(interleaved_runs, interleaved_theirs):
    """msprobe's dump of the same run (its start() given the same list): the same records in the same order, the
    same construct.json nodes, parents as in the hand-written schedule's test (the embedding's backward calls)."""
    ours = interleaved_runs["tbprobe"]
    for step in STEPS:
        for rank in RANKS:
            data = _load(ours, step, rank, "dump")
            assert list(data) == list(_load(interleaved_theirs, step, rank, "dump")), (step, rank)
            mine, ref = _load(ours, step, rank, "construct"), _load(interleaved_theirs, step, rank, "construct")
            assert set(mine) == set(ref)
            apart = {n for n in mine if mine[n] != ref[n]}
            embedding = {n for n in data if n.startswith("Functional.embedding.") and n.endswith(".backward")}
            assert len(embedding) == (INTERLEAVED_MICRO if rank == 0 else 0), (step, rank)
            assert apart == embedding, (step, rank)
            _parents_apart_at_embedding_backward(mine, ref, apart)
            _same_stacks(ours, interleaved_theirs, step, rank)


@pytest.mark.parametrize("schedule", ["torch", "interleaved"])
def test_pipelining_graph_matches_every_node_to_msprobes(schedule, request, tmp_path):
    """`tbprobe graph` builds each rank's steps and matches every node of tbprobe's rank dump to msprobe's, under
    Schedule1F1B and ScheduleInterleaved1F1B. Where it grades nodes apart in steps 1 and 2, they are receives whose
    msprobe record is not what the other rank sent, where tbprobe's is. (Step 0 is matched but its grades are not
    looked at: pipelining's first step infers the shapes by running each stage on torch.empty buffers, whose values
    are whatever memory held.) Under Schedule1F1B msprobe lists steps 1 and 2's first batch_isend_irecv in a group
    of top-level calls with an irecv it misplaced, where tbprobe's stands alone, and its irecv buffers make the
    batch's inputs two tensors where tbprobe's are one: the two records matched once the aligner left those buffers
    out (the batch's first record took the bench's second, and the second stayed unmatched)."""
    ours, theirs = request.getfixturevalue(f"{schedule}_runs")["tbprobe"], request.getfixturevalue(f"{schedule}_theirs")
    for step in STEPS:
        for rank in RANKS:
            nodes, compared = _build_and_compare(_rank_dir(ours, step, rank),
                                                 _rank_dir(theirs, step, rank), tmp_path / f"s{step}r{rank}",
                                                 groups_renumbered=schedule == "torch")
            if step == 0:
                continue
            sent = [_summary(t) for n, record in _load(ours, step, 1 - rank, "dump").items() if n.startswith(P2P)
                    for t in _sent(record, n)]
            apart = [n for n, (index, _) in nodes.items() if index]
            groups = _parents(compared)
            for n in apart:
                # (a group of top-level calls is graded by the worst of them)
                if n.startswith("Apis_Between_Modules."):
                    assert any(groups[c] == n and c.startswith(P2P) for c in apart), (step, rank, n)
                    continue
                assert n.startswith(P2P), (step, rank, n)
                _ours_right_theirs_not(ours, theirs, step, rank, n, sent)


def _popped_worker(rank: int, dump: str, port: int) -> None:
    """torch's send_object_list and recv_object_list (pipelining's metadata exchange) take their one handle out of
    batch_isend_irecv's list and wait on it: `batch_isend_irecv([op]).pop().wait()`."""
    import logging

    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    said = []
    handler = logging.Handler()
    handler.emit = lambda r: said.append(r.getMessage())
    logging.getLogger("tbprobe.collector").addHandler(handler)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg = PrecisionDebugger(dump_path=dump, level="L1", step=[0])
    dbg.start()
    buf = torch.zeros(2)
    if rank == 0:
        dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((2,), 5.0), 1)]).pop().wait()
    else:
        dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, 0)]).pop().wait()
    buf.add_(1)                                       # the buffer changed after the receive ...
    torch.mul(buf, 1)                                 # ... and a call after it
    dist.all_reduce(torch.ones(1))
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(dump, f"said{rank}.json"), "w") as f:
        json.dump({"said": said, "errors": dbg.hook_errors,
                   "wait_restored": getattr(dist.Work.wait, "__wrapped__", None) is None}, f)
    dist.destroy_process_group()


def test_a_batch_whose_handle_list_the_caller_empties_is_recorded_once_with_what_was_received(tmp_path):
    """tbprobe kept batch_isend_irecv's own list of handles, which send_object_list empties with pop(): the record
    was made at wait() but stayed pending with no handle left, made again at every call after it (with the
    buffer's later values) and said 'not complete when its step ended: not recorded' at the step's end."""
    import torch.multiprocessing as mp

    dump = str(tmp_path / "dump")
    os.makedirs(dump)
    mp.spawn(_popped_worker, args=(dump, free_port()), nprocs=2, join=True)
    for rank in RANKS:
        with open(os.path.join(dump, f"said{rank}.json")) as f:
            res = json.load(f)
        assert res["errors"] == 0 and res["wait_restored"]
        assert not [m for m in res["said"] if "not complete" in m], res["said"]
        with open(os.path.join(dump, "step0", f"rank{rank}", "dump.json")) as f:
            data = json.load(f)["data"]
        assert [n for n in data if n.startswith("Distributed.")] == ["Distributed.batch_isend_irecv.0.forward",
                                                                     "Distributed.all_reduce.0.forward"]
        (op,) = data["Distributed.batch_isend_irecv.0.forward"]["output"][0]
        assert op["op"] == ("isend" if rank == 0 else "irecv") and op["tensor"]["Max"] == 5.0
        assert data["Torch.mul.0.forward"]["input_args"][0]["Max"] == (1.0 if rank == 0 else 6.0)


def _late_wait_worker(rank: int, dump: str, port: int) -> None:
    """Rank 1 posts an irecv, runs a torch call and waits for the receive; rank 0 sends only after that call (the
    barrier), so the receive completes after it. Rank 0's isend is waited after a call of its own."""
    import torch.distributed as dist

    from tbprobe import PrecisionDebugger

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dbg = PrecisionDebugger(dump_path=dump, level="mix", step=[0])
    sent, buf, x = torch.full((2,), 5.0), torch.zeros(2), torch.ones(2)
    dbg.start(model=torch.nn.Linear(2, 2))        # (mix asks for one; not called: the calls are top-level ones)
    if rank == 0:
        dist.barrier()
        work = dist.isend(sent, 1)
        torch.mul(x, 2)
    else:
        work = dist.irecv(buf, 0)
        torch.mul(x, 2)
        dist.barrier()
    work.wait()
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(dump, f"errors{rank}.json"), "w") as f:
        json.dump(dbg.hook_errors, f)
    dist.destroy_process_group()


def test_an_isend_or_irecv_waited_late_is_listed_where_it_was_called(tmp_path):
    """tbprobe listed an asynchronous call where it completed (its record is made then, the receive's output the
    received tensor), msprobe where it was called: a call between the two came first in tbprobe's dump.json and
    construct.json, and `Apis_Between_Modules` grouped the top-level calls apart, so the graph compare left
    nodes of the two tools' dumps unmatched (pipelining's schedules wait for their sends at the step's end). It is
    listed where it was called now, with what it received."""
    import torch.multiprocessing as mp

    dump = str(tmp_path / "dump")
    os.makedirs(dump)
    mp.spawn(_late_wait_worker, args=(dump, free_port()), nprocs=2, join=True)
    for rank, call in ((0, "Distributed.isend.0.forward"), (1, "Distributed.irecv.0.forward")):
        with open(os.path.join(dump, f"errors{rank}.json")) as f:
            assert json.load(f) == 0
        folder = os.path.join(dump, "step0", f"rank{rank}")
        with open(os.path.join(folder, "dump.json")) as f:
            data = json.load(f)["data"]
        with open(os.path.join(folder, "construct.json")) as f:
            construct = json.load(f)
        assert list(data) == [call, "Torch.mul.0.forward"]
        assert list(construct) == [call, "Torch.mul.0.forward"]
        if rank == 1:
            assert data[call]["input_args"][0] is None and data[call]["output"][0]["Max"] == 5.0
        else:
            assert data[call]["input_args"][0]["Max"] == 5.0
