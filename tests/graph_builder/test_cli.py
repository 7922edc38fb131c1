"""The command lines: `tbprobe graph` (both forms), `tbprobe compare` (CSV and XLSX), and bad input: one line
naming the file and the problem, exit code 2, nothing left in the output folder."""
import csv
import json
import shutil

import pytest

from tbprobe.cli import main
from tbprobe.graph_builder import compare_nodes
from tests.graph_builder import golden, synth

F = golden.INPUTS


def test_graph_build_and_compare(tmp_path, capsys):
    assert main(["graph", "-tp", str(F / "npu_stat"), "-o", str(tmp_path / "b"), "-oc", "-q"]) == 0
    out = capsys.readouterr().out
    assert "48 debug nodes" in out and "first overflow: step 0 rank 0: Torch.exp.0.forward" in out
    assert len(list((tmp_path / "b").glob("build_*.vis.db"))) == 1
    assert main(["graph", "-tp", str(F / "npu_md5"), "-gp", str(F / "bench_md5"), "-o", str(tmp_path / "c"),
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert "mode md5: matched 43" in out and "unmatched 4" in out
    assert "first divergent node: step 0 rank 0: Module.layers.1.fc.Linear.forward.0" in out
    assert len(list((tmp_path / "c").glob("compare_*.vis.db"))) == 1


def test_compare_table_cells_as_the_references(tmp_path, capsys):
    """Tensor mode: Data_name names both sides' files (the bench's was left out), a None on both sides is a pass
    (N/A was written outside statistics mode). XLSX: the reference's sheet, numbers and booleans as such (every
    cell was text: no numeric sort or filter), and no cell a spreadsheet runs as a formula."""
    assert main(["compare", "-tp", str(F / "npu_tensor"), "-gp", str(F / "bench_tensor"), "-o", str(tmp_path / "t")]) == 0
    rows = list(csv.DictReader(next((tmp_path / "t").glob("compare_result_*.csv")).open()))
    named = [r for r in rows if r["Data_name"] != "['-1', '-1']" and r["Bench Name"] != "N/A"]
    assert named and all(r["Data_name"].startswith("['") and r["Data_name"].count(".pt'") == 2 for r in named)
    nones = [r for r in rows if r["NPU Dtype"] == "N/A" and r["Bench Name"] != "N/A"]
    assert nones and all(r["Result"] == "pass" and r["Requires_grad Consistent"] == "True" for r in nones)

    import openpyxl

    docs = synth.read_rank("npu_stat")
    data = docs["dump.json"]["data"]
    data["=HYPERLINK(\"x\").0.forward"] = data.pop("Functional.linear.0.forward")
    for side in ("d", "b"):
        synth.write_rank(tmp_path / side, docs)
    assert main(["compare", "-tp", str(tmp_path / "d"), "-gp", str(tmp_path / "b"), "-o", str(tmp_path / "x"),
                 "--xlsx"]) == 0
    wb = openpyxl.load_workbook(next((tmp_path / "x").glob("compare_result_*.xlsx")))
    assert wb.sheetnames == ["Sheet1"]
    ws = wb.active
    header = [c.value for c in next(ws.iter_rows(max_row=1))]
    cells = [dict(zip(header, [c.value for c in r])) for r in ws.iter_rows(min_row=2)]
    assert all(c.data_type != "f" for r in ws.iter_rows() for c in r)
    assert any(str(r["NPU Name"]).startswith("'=HYPERLINK") for r in cells)
    assert any(isinstance(r["NPU max"], float) for r in cells)
    assert all(isinstance(r["Requires_grad Consistent"], bool) for r in cells if r["Bench Name"] != "N/A")
    assert main(["compare", "-tp", str(tmp_path / "d"), "-gp", str(tmp_path / "b"), "-o", str(tmp_path / "c")]) == 0
    text = next((tmp_path / "c").glob("compare_result_*.csv")).read_text()
    assert "'=HYPERLINK" in text


def test_older_input_json_form(tmp_path, capsys):
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(F / "npu_stat"), "bench_path": str(F / "bench_stat"),
                                "is_print_compare_log": True}))
    assert main(["graph", "-i", str(spec), "-o", str(tmp_path / "o"), "-q"]) == 0
    assert "compare graph" in capsys.readouterr().out


def test_compare_table_csv_and_xlsx(tmp_path, capsys):
    assert main(["compare", "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_stat"), "-o", str(tmp_path)]) == 0
    path = next(tmp_path.glob("compare_result_*.csv"))
    rows = list(csv.reader(path.open()))
    assert rows[0][:3] == ["NPU Name", "Bench Name", "NPU Dtype"] and rows[0][-1] == "NPU_Stack_Info"
    assert len(rows) == 127  # as many item rows as the reference's table for these dumps
    first = dict(zip(rows[0], rows[1]))
    assert first["NPU Name"] == "Functional.linear.0.forward.input.0" and first["Result"] == "pass"
    unmatched = [r for r in rows if r[0].startswith("Torch.exp.0.forward")]
    assert unmatched and all(r[1] == "N/A" for r in unmatched)
    out = tmp_path / "x"
    assert main(["compare", "-tp", str(F / "npu_md5"), "-gp", str(F / "bench_md5"), "-o", str(out), "--xlsx"]) == 0
    import openpyxl
    ws = openpyxl.load_workbook(next(out.glob("compare_result_*.xlsx"))).active
    header = [c.value for c in next(ws.iter_rows(max_row=1))]
    assert "NPU MD5" in header and "BENCH MD5" in header


def _bad(tmp_path, argv, capsys, *names):
    out = tmp_path / "out"
    code = main(argv + ["-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("tbprobe: error: ")
    for name in names:
        assert name in err
    assert not out.exists() or not any(out.iterdir())
    return err


def test_missing_folder(tmp_path, capsys):
    _bad(tmp_path, ["graph", "-tp", str(tmp_path / "nope")], capsys, "nope", "no such folder")


def test_malformed_dump_in_one_rank(tmp_path, capsys):
    shutil.copytree(F / "npu_dist", tmp_path / "d")
    bad = tmp_path / "d" / "step0" / "rank1" / "dump.json"
    bad.write_text('{"task": "statistics", "data": {"x": ')
    _bad(tmp_path, ["graph", "-tp", str(tmp_path / "d")], capsys, str(bad))


def test_missing_dump_json(tmp_path, capsys):
    (tmp_path / "d" / "step0" / "rank0").mkdir(parents=True)
    _bad(tmp_path, ["graph", "-tp", str(tmp_path / "d")], capsys, "rank0", "dump.json")


def test_mismatched_layouts(tmp_path, capsys):
    # no step and rank in common (a steps folder against a step folder of ranks, or other steps)
    other = tmp_path / "other"
    shutil.copytree(F / "bench_dist" / "step0", other / "step3")
    _bad(tmp_path, ["graph", "-tp", str(F / "npu_dist"), "-gp", str(other)], capsys, "other", "do not match")
    # one rank's folder against several ranks
    _bad(tmp_path, ["graph", "-tp", str(F / "npu_dist"), "-gp", str(F / "bench_dist" / "step0" / "rank0")], capsys,
         "rank0", "do not match")


def test_different_tasks(tmp_path, capsys):
    _bad(tmp_path, ["graph", "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_tensor")], capsys,
         "different tasks")


def _at_level(tmp_path, src, level):
    dst = tmp_path / f"{src}_{level}"
    shutil.copytree(F / src, dst)
    dump = dst / "step0" / "rank0" / "dump.json"
    doc = json.loads(dump.read_text())
    doc["level"] = level
    dump.write_text(json.dumps(doc))
    return dst


def test_levels_that_share_no_node(tmp_path, capsys):
    # (L0's modules against L1's operators: 0 matched, every node unmatched, "first divergent node: none")
    _bad(tmp_path, ["graph", "-tp", str(_at_level(tmp_path, "npu_stat", "L0")), "-gp",
                    str(_at_level(tmp_path, "bench_stat", "L1"))], capsys, "levels L0 and L1", "share no node")


def test_levels_that_differ_are_noted(tmp_path, capsys):
    assert main(["graph", "-tp", str(_at_level(tmp_path, "npu_stat", "mix")), "-gp",
                 str(_at_level(tmp_path, "bench_stat", "L1")), "-o", str(tmp_path / "o"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "debug dumped at level mix, bench at L1: only the nodes both levels record can match (operators)" in out
    assert main(["graph", "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_stat"), "-o", str(tmp_path / "p"),
                 "-q"]) == 0
    assert "dumped at level" not in capsys.readouterr().out


def test_bad_yaml(tmp_path, capsys):
    y = tmp_path / "map.yaml"
    y.write_text("Layer: [unclosed")
    _bad(tmp_path, ["graph", "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_stat"), "-lm", str(y)], capsys,
         str(y), "YAML")


def test_missing_manual_matches_file(tmp_path, capsys):
    # (it was read as no matches, exit 0: a typo in the path went unseen)
    missing = tmp_path / "nope.vis.config"
    _bad(tmp_path, ["graph", "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_stat"), "--manual-matches",
                    str(missing)], capsys, str(missing), "not found")


def test_output_not_writable(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["graph", "-tp", str(F / "npu_stat"), "-o", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot create the output folder" in err and str(blocker) in err
    assert blocker.read_text() == "x"


def test_bad_compare_json(tmp_path, capsys):
    spec = tmp_path / "compare.json"
    spec.write_text("{not json")
    _bad(tmp_path, ["graph", "-i", str(spec)], capsys, str(spec), "JSON")


@pytest.mark.parametrize("mode", ["statistics", "summary", "md5"])
def test_compare_nodes_for_manual_matches(mode):
    """The plugin's manual match: compare two stored rows; same answer as the full compare run."""
    case = "cmp_md5" if mode == "md5" else "cmp_stat"
    ref = golden.nodes(golden.reference_db(case))
    d = ref["NPU_0_0_Module.layers.1.fc.Linear.forward.0"]
    b = ref["Bench_0_0_Module.layers.1.fc.Linear.forward.0"]
    strip = ("Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
             "MeanRelativeErr", "NormRelativeErr", "Requires_grad Consistent", "Result", "Err_message")

    def plain(data):
        return {k: {f: v for f, v in item.items() if f not in strip} for k, item in json.loads(data).items()}

    prec, ind, outd = compare_nodes({"input_data": plain(d["input_data"]), "output_data": plain(d["output_data"])},
                                    {"input_data": plain(b["input_data"]), "output_data": plain(b["output_data"])},
                                    mode)
    assert prec == d["precision_index"]
    assert ind == json.loads(d["input_data"])
    assert outd == json.loads(d["output_data"])


def test_bare_value_in_an_argument(tmp_path, capsys):
    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                "data": {"Torch.a.0.forward": {"input_args": [[5]], "output": []}}}))
    (rank / "construct.json").write_text('{"Torch.a.0.forward": null}')
    (rank / "stack.json").write_text("{}")
    _bad(tmp_path, ["graph", "-tp", str(tmp_path / "d")], capsys, '"Torch.a.0.forward.input.0.0"', "bare int")
    shutil.copytree(tmp_path / "d", tmp_path / "b")
    _bad(tmp_path, ["graph", "-tp", str(tmp_path / "d"), "-gp", str(tmp_path / "b")], capsys, "bare int")


def _one_rank(tmp_path, data, construct=None, extra=None):
    """A debug dump of one rank under tmp_path/d: dump.json's data, construct.json (every entry top level unless
    given) and the side files in `extra` ({name: text})."""
    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    text = json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "data": data})
    # (the argument nested 990 deep, as text: json.dumps itself runs out of stack under pytest)
    (rank / "dump.json").write_text(text.replace('"DEEP"', "[" * 990 + json.dumps(_ITEM) + "]" * 990))
    (rank / "construct.json").write_text(construct if construct is not None else json.dumps({k: None for k in data}))
    (rank / "stack.json").write_text("{}")
    for name, text in (extra or {}).items():
        (rank / name).write_text(text)
    return rank


_ITEM = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
         "Norm": 1.0, "requires_grad": False}


@pytest.mark.parametrize("bench", [False, True])
@pytest.mark.parametrize("case,words", [
    # each was a traceback (exit 1), or read as nothing and compared as a pass
    ("deep", ["nested"]),          # (the decoder or the argument walk says so, by the stack left)
    ("output_int", ['"output" is of type int']),
    ("kwargs_list", ['"input_kwargs" is of type list']),
    ("micro_step", ["construct.json", "expected [parent, micro_step]"]),
    ("dataflow_list", ["dataflow.json", "each producer a record name"]),
    ("dataflow_null", ["dataflow.json", "each producer a record name"]),
    ("dataflow_deep", ["dataflow.json", "nested too deeply"]),
    ("surrogate", ["not valid Unicode", "\\ud800"]),
])
def test_hostile_dumps_are_one_line_and_exit_2(tmp_path, capsys, case, words, bench):
    data = {"Torch.a.0.forward": {"input_args": [_ITEM], "input_kwargs": {}, "output": [_ITEM]},
            "Torch.b.0.forward": {"input_args": [_ITEM], "input_kwargs": {}, "output": [_ITEM]}}
    construct, extra = None, {}
    if case == "deep":
        data["Torch.a.0.forward"]["input_args"] = ["DEEP"]
    elif case == "output_int":
        data["Torch.a.0.forward"]["output"] = 7
    elif case == "kwargs_list":
        data["Torch.a.0.forward"]["input_kwargs"] = [1, 2]
    elif case == "micro_step":
        construct = json.dumps({"Torch.a.0.forward": [None, 10 ** 30], "Torch.b.0.forward": None})
    elif case == "dataflow_list":
        extra["dataflow.json"] = json.dumps({"Torch.b.0.forward": {"0": ["Torch.a.0.forward"]}})
    elif case == "dataflow_null":
        extra["dataflow.json"] = json.dumps({"Torch.b.0.forward": {"0": None}})
    elif case == "dataflow_deep":
        extra["dataflow.json"] = '{"a": ' + "[" * 100000 + "]" * 100000 + "}"
    elif case == "surrogate":
        data["\ud800.0.forward"] = data.pop("Torch.b.0.forward")
    _one_rank(tmp_path, data, construct, extra)
    args = ["graph", "-tp", str(tmp_path / "d")]
    if bench:
        shutil.copytree(tmp_path / "d", tmp_path / "b")
        args += ["-gp", str(tmp_path / "b")]
    _bad(tmp_path, args, capsys, *words)


def test_compare_of_a_hostile_dump_leaves_no_folder(tmp_path, capsys):
    data = {"\ud800.0.forward": {"input_args": [_ITEM], "input_kwargs": {}, "output": [_ITEM]}}
    _one_rank(tmp_path, data)
    _bad(tmp_path, ["compare", "-tp", str(tmp_path / "d"), "-gp", str(tmp_path / "d")], capsys, "not valid Unicode")


def test_a_compare_of_runs_with_different_ranks_compares_the_ranks_both_have(tmp_path, capsys):
    """A run with a rank filter (or one whose rank died) against a full run: refused before ("give both sides the
    same layout"); msprobe compares the ranks both have, and so does tbprobe now, naming the others."""
    bench = tmp_path / "bench"
    shutil.copytree(F / "bench_dist", bench)
    shutil.rmtree(bench / "step0" / "rank1")
    assert main(["graph", "-tp", str(F / "npu_dist"), "-gp", str(bench), "-o", str(tmp_path / "c"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "1 step x rank graph(s)" in out
    assert "not compared (the other side has no such folder): debug step 0 rank 1" in out
    (db,) = (tmp_path / "c").glob("compare_*.vis.db")
    import sqlite3

    con = sqlite3.connect(db)
    try:
        ranks = {r for (r,) in con.execute("SELECT DISTINCT rank FROM tb_nodes")}
    finally:
        con.close()
    assert ranks == {0}


def test_graph_visualize_is_the_graph_command_under_the_references_name(tmp_path, capsys):
    assert main(["graph_visualize", "-tp", str(F / "npu_stat"), "-o", str(tmp_path / "b"), "-q"]) == 0
    assert "48 debug nodes" in capsys.readouterr().out


def test_a_summary_with_overflows_but_no_first_one_says_why(tmp_path, capsys):
    """Overflow nodes whose inputs were already bad (level medium) are counted, and none is where an overflow
    starts: the summary read "overflow nodes: 1, first overflow: none", a contradiction to its reader."""
    from tests.graph_builder import synth

    nan = synth.tensor((2, 2), mx=float("nan"), mn=float("nan"), mean=float("nan"), norm=float("nan"))
    folder = synth.simple_rank(tmp_path / "dump" / "step0" / "rank0",
                               {"Torch.mul.0.forward": synth.api_entry([nan], [nan])}, {"Torch.mul.0.forward": None})
    assert main(["graph", "-tp", str(folder), "-o", str(tmp_path / "b"), "-oc", "-q"]) == 0
    out = capsys.readouterr().out
    assert "overflow nodes: 1, first overflow: none (no node turns finite inputs into inf/nan, other than by an " \
           "inf/nan argument)" in out, out


def test_a_summary_with_the_overflow_check_and_no_overflow_says_so(tmp_path, capsys):
    """-oc asked for and nothing overflowed: the summary says so (it had no overflow line, nothing showed that the
    check ran); without -oc it has none."""
    from tests.graph_builder import synth

    one = synth.tensor((2, 2), mx=1.0, mn=0.0, mean=0.5, norm=1.0)
    folder = synth.simple_rank(tmp_path / "dump" / "step0" / "rank0",
                               {"Torch.mul.0.forward": synth.api_entry([one], [one])}, {"Torch.mul.0.forward": None})
    assert main(["graph", "-tp", str(folder), "-o", str(tmp_path / "b"), "-oc", "-q"]) == 0
    out = capsys.readouterr().out
    assert "overflow nodes: 0, first overflow: none" in out, out
    assert main(["graph", "-tp", str(folder), "-o", str(tmp_path / "c"), "-q"]) == 0
    assert "overflow nodes" not in capsys.readouterr().out


@pytest.mark.parametrize("case,problem", [
    ("args_dict", 'entry "A.b.0.forward": "input_args" is of type dict, where a list of items is expected'),
    ("bare_int", 'entry argument "A.b.0.forward.input.0.0" is a bare int, where an item'),
])
@pytest.mark.parametrize("command,bad_side", [("build", "d"), ("graph", "d"), ("graph", "b"), ("compare", "d"),
                                              ("compare", "b"), ("helper", "d"), ("helper", "b")])
def test_a_bad_entry_names_its_file(tmp_path, capsys, monkeypatch, case, problem, command, bad_side):
    """Found in the row work, where only the entry was known, the message lacked the file that every other one
    names; it names the side's dump.json now (also when the forked row helper finds it)."""
    good = {"input_args": [_ITEM], "input_kwargs": {}, "output": [_ITEM]}
    bad = {"input_args": {"x": 1}, "output": [_ITEM]} if case == "args_dict" else \
        {"input_args": [[5]], "input_kwargs": {}, "output": [_ITEM]}
    for side in ("d", "b"):
        data = {"A.a.0.forward": good, "A.b.0.forward": bad if side == bad_side else good,
                "A.c.0.forward": good}
        rank = tmp_path / side / "step0" / "rank0"
        rank.mkdir(parents=True)
        (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                    "data": data}))
        (rank / "construct.json").write_text(json.dumps({k: None for k in data}))
        (rank / "stack.json").write_text("{}")
    if command == "helper":   # every other node's row to the forked helper: A.b.0.forward is its
        from tbprobe.graph_builder import engine, run

        monkeypatch.setattr(engine, "SPLIT_MIN_NODES", 0)
        monkeypatch.setattr(engine, "_BLOCK", 1)
        monkeypatch.setattr(run, "SPLIT_IDLE", 0)
        monkeypatch.setattr("os.cpu_count", lambda: 2)
    args = ["graph", "-tp", str(tmp_path / "d")] if command == "build" else \
        ["compare" if command == "compare" else "graph", "-tp", str(tmp_path / "d"), "-gp", str(tmp_path / "b")]
    err = _bad(tmp_path, args, capsys)
    assert err.startswith(f"tbprobe: error: {tmp_path / bad_side / 'step0' / 'rank0' / 'dump.json'}: {problem}"), err


@pytest.mark.parametrize("command", ["graph", "compare"])
def test_an_output_onto_a_dangling_link_says_so(tmp_path, capsys, command):
    """It said "cannot create the output folder (File exists)", after all the work; a link to a folder is
    followed."""
    import os

    link = tmp_path / "link"
    os.symlink(tmp_path / "nowhere" / "x", link)
    args = [command, "-tp", str(F / "npu_stat"), "-gp", str(F / "bench_stat")]
    for out in (link, link / "sub"):
        assert main(args + ["-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (f"tbprobe: error: {out}: cannot create the output folder ({link} is a dangling symbolic link: "
                       f"its target {tmp_path / 'nowhere' / 'x'} does not exist)\n")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "good")
    assert main(args + ["-o", str(tmp_path / "good")]) == 0
    capsys.readouterr()
    assert len(list((tmp_path / "real").iterdir())) == 1
