"""What a step writes beside its records and how: dataflow.json's links (a list argument's items too), the health
events (max_abs counting finite values whose Norm overflowed), the live graph per rank with its data flow,
stack.json's source lines, and the async_dump and precision keys."""
import glob
import json
import math
import os

import pytest
import torch
from conftest import dump_of, load_rank, make_debugger, rank_dirs
from run_model import train

from tbprobe import PrecisionDebugger


def test_dataflow_side_file_and_health_events(tmp_path):
    dbg = make_debugger(tmp_path, level="L1", steps=2)
    train(dbg, "mlp", 2)
    dbg.close()
    rank = rank_dirs(str(tmp_path / "dump"))[0]
    with open(os.path.join(rank, "dataflow.json")) as f:
        flow = json.load(f)
    assert flow["Functional.relu.0.forward"] == {"0": "Functional.linear.0.forward"}
    assert flow["Functional.linear.1.forward"]["0"] == "Functional.relu.0.forward"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events_dir,) = glob.glob(str(tmp_path / "dump_tb" / "events" / "*"))
    acc = EventAccumulator(events_dir)
    acc.Reload()
    assert {"tbprobe/records", "tbprobe/nonfinite_tensors", "tbprobe/max_abs"} <= set(acc.Tags()["scalars"])
    records = acc.Scalars("tbprobe/records")
    assert [e.step for e in records] == [0, 1] and records[0].value == len(load_rank(rank)["dump"]["data"])


@pytest.mark.parametrize("level", ["mix", "L1"])
def test_dataflow_follows_a_custom_function_that_returns_its_input(tmp_path, level):
    """A custom Function whose forward returns its input as it is (Megatron's copy-to-tensor-parallel-region)
    hands on a view autograd makes of it, which no recorded call produced: the linear layers after it had no
    dataflow.json entry, and the graph builder's first divergence skipped the layer whose weight was off. The
    view's base, at the same version, names the real producer."""
    dbg = make_debugger(tmp_path, level=level, steps=2)
    train(dbg, "tp", 2)
    dbg.close()
    for step in (0, 1):
        (rank,) = rank_dirs(str(tmp_path / "dump"), step)
        with open(os.path.join(rank, "dataflow.json")) as f:
            flow = json.load(f)
        assert "Functional.linear.0.forward" not in flow      # (its input is the data)
        assert flow["Functional.linear.1.forward"] == {"0": "Functional.relu.0.forward"}
        assert flow["Functional.relu.0.forward"] == {"0": "Functional.linear.0.forward"}


def test_dataflow_does_not_follow_a_view_whose_base_changed_since(tmp_path):
    """A view's base names the producer only at the version it left: written in place since (an unrecorded
    copy_), the view holds values no recorded call made."""
    dbg = make_debugger(tmp_path, level="L1")
    dbg.start()
    a = torch.exp(torch.randn(4, 3))
    torch.relu(a.view(12))               # a's view, as exp left it
    b = torch.exp(torch.randn(4, 3))
    b.copy_(torch.ones(4, 3))            # (copy_ is not recorded)
    torch.relu(b.view(12))
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dataflow.json")) as f:
        flow = json.load(f)
    assert flow["Torch.relu.0.forward"] == {"0": "Torch.exp.0.forward"}
    assert "Torch.relu.1.forward" not in flow


def test_dataflow_does_not_skip_a_recorded_view_in_a_chain_of_views(tmp_path):
    """torch keeps the first tensor of a chain of views as every view's base: `z.narrow(...)` recorded, then an
    unrecorded `.view(-1)` of it, linked tanh to matmul (the base's producer) past the narrow that made its input.
    Where a recorded call's output is a view of that base, the base names no producer."""
    dbg = make_debugger(tmp_path, level="L1")
    dbg.start()
    z = torch.matmul(torch.randn(4, 3), torch.randn(3, 5))
    y = z.narrow(0, 1, 2)
    torch.tanh(y.view(-1))
    dbg.stop()
    dbg.step()
    dbg.close()
    rank = rank_dirs(str(tmp_path / "dump"))[0]
    with open(os.path.join(rank, "dataflow.json")) as f:
        flow = json.load(f)
    with open(os.path.join(rank, "dump.json")) as f:
        names = set(json.load(f)["data"])
    assert "Tensor.narrow.0.forward" in names and flow["Tensor.narrow.0.forward"] == {"0": "Torch.matmul.0.forward"}
    assert flow.get("Torch.tanh.0.forward", {}).get("0") != "Torch.matmul.0.forward"


def test_dataflow_links_the_tensors_of_a_list_argument(tmp_path):
    """torch.cat([c, d]) had no dataflow entry: only top-level positional tensors were linked. Its slots are named
    as its items are, `0.0` and `0.1`. (cat is a low-risk call, recorded with data at risk_level ALL.)"""
    dbg = make_debugger(tmp_path, level="L1", risk_level="ALL")
    dbg.start()
    x = torch.randn(2, 3)
    c = torch.exp(x)
    d = torch.add(x, 1)
    torch.cat([c, x, d], dim=1)
    dbg.stop()
    dbg.step()
    dbg.close()
    with open(os.path.join(rank_dirs(str(tmp_path / "dump"))[0], "dataflow.json")) as f:
        flow = json.load(f)
    assert flow["Torch.cat.0.forward"] == {"0.0": "Torch.exp.0.forward", "0.2": "Torch.add.0.forward"}


@pytest.mark.parametrize("size", [3, 100_000])     # (the host kernel's items; the batched device path's)
def test_max_abs_counts_finite_values_whose_norm_overflowed(tmp_path, size):
    """The health scalar max_abs left out a tensor whose values were finite but whose float32 Norm (or Mean)
    overflowed: the values growing towards an overflow, which the scalar is there to show."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0, 1])
    for big in (1e10, 1e30):
        dbg.start()
        x = torch.tensor([1.0, -2.0, 0.5]).repeat(size // 3)
        (x * big).mean()
        dbg.stop()
        dbg.step()
    dbg.close()
    (events_dir,) = glob.glob(str(tmp_path / "dump_tb" / "events" / "*"))
    acc = EventAccumulator(events_dir)
    acc.Reload()
    got = [e.value for e in acc.Scalars("tbprobe/max_abs")]
    out = load_rank(rank_dirs(str(tmp_path / "dump"), 1)[0])["dump"]["data"]["Tensor.__mul__.0.forward"]["output"][0]
    assert math.isinf(out["Norm"]) and math.isfinite(out["Min"])
    assert got == [pytest.approx(2e10), pytest.approx(2e30, rel=1e-6)]


def test_live_build_graph_per_rank(tmp_path):
    import sqlite3

    dbg = make_debugger(tmp_path, level="mix", steps=2)
    train(dbg, "mlp", 2)
    dbg.close()
    assert dbg.hook_errors == 0, dict(dbg.guard.counts)
    (db,) = glob.glob(str(tmp_path / "dump_tb" / "build_proc*.vis.db"))
    con = sqlite3.connect(db)
    try:
        graphs = sorted(con.execute("SELECT DISTINCT step FROM tb_nodes").fetchall())
        names = {r[0] for r in con.execute("SELECT node_name FROM tb_nodes WHERE step=1")}
        edges = set(con.execute("SELECT src, dst, dst_slot FROM tbprobe_edges WHERE graph_id LIKE 'NPU_1_%'"))
    finally:
        con.close()
    assert graphs in ([(1,)], [(0,), (1,)])          # an older step may be skipped when the writer is behind
    assert {"Module.fc1.Linear.forward.0", "Functional.linear.0.forward", "DefaultModel"} <= names
    # its data flow too, as `tbprobe graph` writes it from the same dump (the live graph had no edges)
    rank = rank_dirs(str(tmp_path / "dump"), 1)[0]
    with open(os.path.join(rank, "dataflow.json")) as f:
        flow = json.load(f)
    assert edges and edges == {(p, c, slot) for c, slots in flow.items() for slot, p in slots.items()}


def test_async_dump_and_precision_keys_take_effect(tmp_path):
    import torch.nn as nn

    for async_dump, precision in ((False, "low"), (True, "high")):
        out = tmp_path / f"a{int(async_dump)}"
        cfg = {"task": "statistics", "dump_path": str(out / "dump"), "level": "L0", "step": [0, 1],
               "async_dump": async_dump, "precision": precision}
        (tmp_path / "c.json").write_text(json.dumps(cfg))
        dbg = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
        assert dbg.session.stats.low_precision is (precision == "low")
        model = nn.Sequential(nn.Linear(3, 2))
        dbg.start(model=model)
        model(torch.randn(4, 3)).sum().backward()
        dbg.stop()
        dbg.step()
        # async: a writer thread; synchronous: step() writes itself, the files complete on return, before close()
        assert (dbg._writer._thread is not None) is async_dump
        if not async_dump:
            assert os.path.exists(rank_dirs(str(out / "dump"), 0)[0] + "/dump.json")
        dbg.close()
        assert os.path.exists(rank_dirs(str(out / "dump"), 0)[0] + "/dump.json")


def test_stack_lines_name_the_calling_source_line(tmp_path):
    """Stacks are keyed by bytecode offsets and turned into lines once; the lines must still be the source lines."""
    import inspect

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", step=[0])
    x = torch.ones(3, requires_grad=True)
    dbg.start()
    here = inspect.currentframe().f_lineno
    y = torch.exp(x); z = torch.exp(y)  # noqa: E702  two calls on one line: one stack entry
    w = torch.sin(z)
    dbg.stop()
    dbg.step()
    dbg.close()
    stacks = dump_of(tmp_path)["stack"]
    by_name = {n: lines for names, lines in stacks.values() for n in names}
    for name, line in (("Torch.exp.0.forward", here + 1), ("Torch.exp.1.forward", here + 1),
                       ("Torch.sin.0.forward", here + 2)):
        top = by_name[name][0]
        assert top.startswith(f"File {__file__}, line {line}, in test_stack_lines_name_the_calling_source_line")
    assert by_name["Torch.exp.0.forward"] is not None
    same = [names for names, _ in stacks.values() if "Torch.exp.0.forward" in names][0]
    assert "Torch.exp.1.forward" in same and w is not None


def test_the_live_graph_is_marked_ended_when_the_run_ends(tmp_path):
    """A live graph says `live` "1" while training runs and "0" once the run is over, with close() or without it
    (a script that ends after its last step() call: every step collected, nothing closed it), so TensorBoard's
    page stops waiting for more steps. A process killed keeps its "1" (nothing runs to say otherwise)."""
    import sqlite3
    import subprocess
    import sys
    import textwrap

    def live_flag() -> str:
        (db,) = glob.glob(str(tmp_path / "dump_tb" / "build_*.vis.db"))
        con = sqlite3.connect(db)
        try:
            return con.execute("SELECT value FROM tbprobe_meta WHERE key = 'live'").fetchone()[0]
        finally:
            con.close()

    script = textwrap.dedent(f"""
        import torch
        from tbprobe import PrecisionDebugger
        model = torch.nn.Linear(4, 4)
        dbg = PrecisionDebugger(dump_path={str(tmp_path / "dump")!r}, task="statistics", level="L0")
        for _ in range(3):
            dbg.start(model)
            model(torch.randn(2, 4)).sum().backward()
            dbg.stop()
            dbg.step()
        import sqlite3, glob
        (db,) = glob.glob({str(tmp_path / "dump_tb" / "build_*.vis.db")!r})
        print(sqlite3.connect(db).execute("SELECT value FROM tbprobe_meta WHERE key = 'live'").fetchone()[0])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"    # while the run goes on
    assert live_flag() == "0"             # after its exit, with no close()


def test_the_live_graph_grades_overflows(tmp_path):
    """An fp16 run's overflow shows in the live graph: its levels and the file's overflow_check flag (the live
    graph was built without them: no level on any node, no Overflow view for the running job)."""
    import sqlite3

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    with torch.no_grad():
        lin.weight.mul_(1e5)          # its float16 output passes 65504: inf, made right there
    dbg = make_debugger(tmp_path, level="L1", steps=1)
    dbg.start(model=lin)
    with torch.autocast("cpu", dtype=torch.float16):
        torch.tanh(lin(torch.randn(4, 8) * 100))
    dbg.stop()
    dbg.step()
    dbg.close()
    (db,) = glob.glob(str(tmp_path / "dump_tb" / "build_proc*.vis.db"))
    con = sqlite3.connect(db)
    try:
        levels = dict(con.execute("SELECT node_name, overflow_level FROM tb_nodes WHERE overflow_level IS NOT NULL"))
        (config,) = con.execute("SELECT overflow_check FROM tb_config").fetchone()
    finally:
        con.close()
    assert levels == {"Functional.linear.0.forward": "critical", "Torch.tanh.0.forward": "medium"}
    assert config in (1, "1", True)
