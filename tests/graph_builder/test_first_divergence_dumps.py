"""The first divergence on real dumps from tbprobe's own collector (a tiny model at L1 on CPU, the debug run's
Linear weight broken): linear(x, w) is where the difference enters, though an earlier recorded output has the
weight's Max, Min, Mean and Norm. Such an output "holds" a failing leaf input (a view of it, the collector records
views without data flow) only with the input's element count and dtype, when it fails itself and when its Max and
Min differ (all zeros is any zeros buffer's statistics)."""
import glob
import json
import textwrap

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder import golden
from tests.graph_builder.conftest import collect_sides, step0_rank_dir

CASES = ("zeros_mask", "passing_copy", "other_numel", "other_dtype", "failing_zeros")
# the record of the earlier output, before linear's
EARLIER = {"zeros_mask": "Tensor.__mul__.0.forward", "passing_copy": "Tensor.__truediv__.0.forward",
           "other_numel": "Functional.pad.0.forward", "other_dtype": "Tensor.__mul__.0.forward",
           "failing_zeros": "Tensor.__mul__.0.forward"}

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch, torch.nn as nn, torch.nn.functional as F
    from tbprobe import PrecisionDebugger
    out, broken = sys.argv[1], sys.argv[2] == "1"
    sym = torch.cat([torch.arange(-32.0, 0.0), torch.arange(1.0, 33.0)])   # a Mean of exactly 0

    class M(nn.Module):
        def __init__(s, case):
            super().__init__()
            s.case = case
            s.fc = nn.Linear(8, 8)
            s.register_buffer("table", torch.randn(64))
            s.register_buffer("gate", torch.ones(()))

        def forward(s, x):
            case = s.case
            if case == "zeros_mask":        # an attention mask, all zeros on both sides
                early = torch.zeros(3, 5) * 2
            elif case == "passing_copy":    # the same on both sides; the debug weight has its values
                early = torch.arange(64.0).view(8, 8) / 64
            elif case == "other_numel":     # the debug table (the debug weight's values) and 64 zeros: 128 elements
                early = F.pad(s.table, (0, 64))
            elif case == "other_dtype":     # the debug table in float64
                early = s.table.double() * 1
            else:                           # failing_zeros: the debug gate is 0, 64 float32 zeros that fail
                early = s.table.view(8, 8) * s.gate
            return s.fc(x).sum() + early.sum()

    for case in %r:
        torch.manual_seed(0)
        model = M(case)
        with torch.no_grad():
            if broken and case in ("zeros_mask", "failing_zeros"):   # a weight that failed to load
                model.fc.weight.zero_()
            elif broken and case == "passing_copy":
                model.fc.weight.copy_(torch.arange(64.0).view(8, 8) / 64)
            elif broken:
                model.table.copy_(sym)
                model.fc.weight.copy_(sym.view(8, 8))
            if broken and case == "failing_zeros":
                model.gate.zero_()
        path = f"{out}/{case}"
        cfg = {"task": "statistics", "dump_path": path, "rank": [], "step": [0], "level": "L1",
               "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
        json.dump(cfg, open(path + "_config.json", "w"))
        dbg = PrecisionDebugger(config_path=path + "_config.json")
        x = torch.randn(2, 8, requires_grad=True)   # (its gradient diverges in linear's backward, later)
        dbg.start(model=model)
        model(x).backward()
        dbg.stop()
        dbg.step()
""") % (CASES,)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory, collector_importable):
    return collect_sides(tmp_path_factory.mktemp("dumps"), SCRIPT)


@pytest.mark.parametrize("case", CASES)
def test_a_broken_weight_argument_is_where_the_divergence_enters(dumps, case, tmp_path):
    debug, bench = step0_rank_dir(dumps / "d" / case), step0_rank_dir(dumps / "b" / case)
    assert glob.glob(debug + "/dataflow.json")   # (the rule reads the data flow: its absence is a collector bug)
    order = list(json.loads(open(debug + "/dump.json").read())["data"])
    assert order[:2] == [EARLIER[case], "Functional.linear.0.forward"]
    result = run_graph(debug, bench, str(tmp_path), parallel=False, progress=False)
    conn = golden.open_ro(result.path)
    row = conn.execute("SELECT node_name FROM tbprobe_findings WHERE graph_id='NPU_0_0' "
                       "AND kind='first_divergence'").fetchone()
    assert row is not None and row[0] == "Functional.linear.0.forward"
