"""/api/findings says why its first divergence was chosen: the page went to a node drawn as passing (precision 0,
every row pass: its weight or an argument differs, so the reference's rule lets its output be 200 % off) with no
word why."""
import json
import os
import sqlite3

import pytest

from tbprobe.graph_builder import run_graph
from tests.graph_builder.finding_cases import scaled_mlp
from tests.tb_plugin.conftest import make_api
from tests.tb_plugin.dump_cases import FC, weighted_rank


def _built(tmp_path, make, debug, bench) -> str:
    make(tmp_path / "d", debug)
    make(tmp_path / "b", bench)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "logs"), parallel=False,
                       progress=False)
    return os.path.basename(result.path)


def _first(tmp_path, file):
    status, body = make_api(tmp_path / "logs").get("/api/findings", run=".", file=file, step=0, rank=0)
    assert status == 200, body
    return body["first_divergence"]


def test_a_node_drawn_as_passing_says_its_inputs_match_and_a_parameter_differs(tmp_path):
    file = _built(tmp_path, weighted_rank, 3.0, 1.0)
    first = _first(tmp_path, file)
    assert first["name"] == FC and first["precision"] == 0 and first["level"] == "pass"
    why = first["why"]
    assert why["rule"] == "inputs_pass" and why["flagged"] is False and why["inputs_match"] is True
    assert why["worst_output"] == {"metric": "NormRelativeErr", "value": pytest.approx(200.0)}
    assert why["differs"] == [{"key": "parameters.weight", "kind": "parameter"}]


def test_a_differing_argument_is_named_with_both_values(tmp_path):
    file = _built(tmp_path, lambda folder, f: scaled_mlp(folder, f, False), 3.0, 1.0)
    why = _first(tmp_path, file)["why"]
    assert why["rule"] == "difference_enters" and why["flagged"] is True and why["inputs_match"] is True
    assert why["differs"] == [{"key": "input.1", "kind": "argument", "debug": "3.0", "bench": "1.0"}]


def test_a_file_written_before_the_reasons_were_stored_still_says_why(tmp_path):
    """Older tbprobe files hold only precision_index, path, traced_from and matched: the reason comes from the
    node's rows (no rule)."""
    file = _built(tmp_path, weighted_rank, 3.0, 1.0)
    path = tmp_path / "logs" / file
    with sqlite3.connect(path) as conn:
        (detail,), = conn.execute("SELECT detail FROM tbprobe_findings WHERE kind = 'first_divergence'")
        old = {k: v for k, v in json.loads(detail).items() if k in ("precision_index", "path", "traced_from",
                                                                    "matched")}
        conn.execute("UPDATE tbprobe_findings SET detail = ? WHERE kind = 'first_divergence'", (json.dumps(old),))
    conn.close()
    why = _first(tmp_path, file)["why"]
    assert why["rule"] is None and why["flagged"] is False and why["inputs_match"] is True
    assert why["worst_output"] == {"metric": "NormRelativeErr", "value": pytest.approx(200.0)}
    assert why["differs"] == [{"key": "parameters.weight", "kind": "parameter"}]


def test_computed_findings_say_they_are_the_earliest_error(api, logdir):
    from tests.tb_plugin.conftest import db_file

    run, file = db_file(logdir, "cmp_tensor")
    status, body = api.get("/api/findings", run=run, file=file, step=0, rank=0)
    assert status == 200 and body["source"] == "computed"
    assert body["run_first_divergence"] is None   # (msprobe's files: every graph's rows would be read)
    why = body["first_divergence"]["why"]
    assert why["rule"] == "earliest_error" and why["flagged"] is True and why["worst_output"] is not None


def test_the_page_reads_a_stored_input_as_the_builder_judged_it():
    """The plugin read stored inputs with a copy of the builder's test that disagreed on NaN (a NaN
    NormRelativeErr failed there, passes in the builder), so `why` could list as differing an input the builder's
    rule had passed (`inputs_pass`). It reads them with the builder's own test now."""
    from tbprobe.tb_plugin.findings import _fails

    cases = [({"Result": "pass", "NormRelativeErr": "nan%"}, False), ({"Result": "pass", "NormRelativeErr": "9.9%"},
             False), ({"Result": "pass", "NormRelativeErr": "10.0%"}, True), ({"Result": "warning"}, True),
             ({"Result": "pass", "Cosine": "nan"}, False), ({"Result": "pass", "Cosine": "0.98"}, True),
             ({"Result": "N/A"}, False)]
    assert [_fails(fields) for fields, _ in cases] == [want for _, want in cases]


def test_a_warning_node_is_not_said_to_be_drawn_as_passing(tmp_path):
    """A file whose earliest flagged node is a warning (msprobe's precision 0.5, yellow on the page): `flagged` was
    "its precision is an error", so the page said of a yellow node that it was "drawn as passing"."""
    file = _built(tmp_path, weighted_rank, 3.0, 1.0)
    with sqlite3.connect(tmp_path / "logs" / file) as conn:
        conn.execute("DROP TABLE tbprobe_findings")   # (computed from the stored results, as for msprobe's files)
        conn.execute("UPDATE tb_nodes SET precision_index = 0.5 WHERE node_name = ? AND data_source = 'NPU'", (FC,))
    conn.close()
    first = _first(tmp_path, file)
    assert first["name"] == FC and first["level"] == "warning"
    assert first["why"]["rule"] == "earliest_warning" and first["why"]["flagged"] is True


def test_a_rank_with_no_divergence_of_its_own_points_at_the_runs_first(tmp_path):
    """A rank the difference reached through a collective has no first divergence of its own: the page said "No
    divergence found." there, where the run's summary named step 1 rank 1. /api/findings gives the run's first
    divergence with every graph's, by the summary's rule (earliest step, then execution order, then rank)."""
    for side, w in (("d", 3.0), ("b", 1.0)):
        for step in (0, 1):
            for rank in (0, 1):
                weighted_rank(tmp_path / side / f"step{step}" / f"rank{rank}", w if (step, rank) == (1, 1) else 1.0)
    result = run_graph(str(tmp_path / "d"), str(tmp_path / "b"), str(tmp_path / "logs"), parallel=False,
                       progress=False)
    assert result.summary["first_divergence"] == f"step 1 rank 1: {FC}"
    api = make_api(tmp_path / "logs")
    file = os.path.basename(result.path)
    for step, rank, own in ((0, 0, None), (1, 0, None), (1, 1, FC)):
        status, body = api.get("/api/findings", run=".", file=file, step=step, rank=rank)
        assert status == 200, body
        assert (body["first_divergence"] or {}).get("name") == own
        assert body["run_first_divergence"] == {"step": 1, "rank": 1, "name": FC, "exec_order": 1}


def test_a_weight_a_few_percent_off_is_named_though_under_the_10_percent_bound(tmp_path):
    """A graph with no error whose first divergence is where a weight 5 % off enters (a bf16 run with one
    planted weight): the weight is under the 10 % an input must pass to fail, and was missing from `differs`
    (the page said the inputs match and named nothing)."""
    file = _built(tmp_path, weighted_rank, 1.05, 1.0)
    first = _first(tmp_path, file)
    assert first["name"] == FC and first["level"] == "pass"
    why = first["why"]
    assert why["rule"] == "difference_enters" and why["flagged"] is False
    assert why["differs"] == [{"key": "parameters.weight", "kind": "parameter"}]


def test_a_warning_chosen_for_want_of_an_error_says_so(tmp_path):
    """The builder's warnings fallback (no node of the step an error: a healthy bf16 run against fp32, where the
    tenfold rule warns on rounding) stores warning_only; the page read that warning as a divergence."""
    file = _built(tmp_path, weighted_rank, 3.0, 1.0)
    assert _first(tmp_path, file)["why"]["warning_only"] is False
    with sqlite3.connect(tmp_path / "logs" / file) as conn:
        (detail,), = conn.execute("SELECT detail FROM tbprobe_findings WHERE kind = 'first_divergence'")
        conn.execute("UPDATE tbprobe_findings SET detail = ? WHERE kind = 'first_divergence'",
                     (json.dumps(dict(json.loads(detail), warning_only=True)),))
    conn.close()
    assert _first(tmp_path, file)["why"]["warning_only"] is True
