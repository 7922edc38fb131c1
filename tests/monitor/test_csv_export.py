"""CSV export in the reference monitor's layout, by function and by the `tbprobe monitor export-csv` command."""
import csv
import glob
import os
import subprocess

import pytest
import torch

from tbprobe.cli import main
from tbprobe.errors import TbprobeError
from tbprobe.monitor import TrainerMon
from tbprobe.monitor.csv_export import export_run, split_name
from tests.monitor.helpers import Net, train, write_config

PEER_PY = os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "msprobe", "bin", "python")


@pytest.fixture(scope="module")
def monitor_out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mon")
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    mon = TrainerMon(write_config(tmp, tmp / "out", targets={"layers.0": {}, "head": {}}, xy_distribution=True,
                                  wg_distribution=True, mv_distribution=True, param_distribution=True,
                                  ops=["min", "max", "mean", "norm", "zeros", "nans"]))
    mon.set_monitor(model, opt)
    train(model, opt, 3)
    mon.close()
    return tmp / "out"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_columns_and_files_are_the_references(monitor_out, tmp_path):
    written = export_run(str(monitor_out / "rank0"), str(tmp_path / "csv"))
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["actv_0-2.csv", "actv_grad_0-2.csv", "exp_avg_1-2.csv", "exp_avg_sq_1-2.csv",
                     "grad_reduced_0-2.csv", "param_origin_0-2.csv", "param_updated_0-2.csv"]
    ops = ["min", "max", "mean", "norm", "zeros", "nans"]
    actv = _rows(tmp_path / "csv" / "actv_0-2.csv")
    assert actv[0] == ["vpp_stage", "name", "step", "micro_step"] + ops + ["shape", "dtype"]
    grad = _rows(tmp_path / "csv" / "grad_reduced_0-2.csv")
    assert grad[0] == ["vpp_stage", "name", "step"] + ops + ["shape", "dtype"]
    assert {r[1] for r in actv[1:]} == {"layers.0.input", "layers.0.output", "head.input", "head.output"}
    row = next(r for r in grad[1:] if r[1] == "head.weight" and r[2] == "0")
    assert row[0] == "0" and row[-2:] == ["[2, 8]", "torch.float32"]
    assert float(row[6]) > 0  # norm
    assert len(actv) == 1 + 4 * 3  # 4 rows per step, 3 steps


def test_cli_export_and_bad_input(monitor_out, tmp_path, capsys):
    assert main(["monitor", "export-csv", str(monitor_out), "-o", str(tmp_path / "x")]) == 0
    assert glob.glob(str(tmp_path / "x" / "*-rank0-tbprobe" / "actv_0-2.csv"))
    assert main(["monitor", "export-csv", str(tmp_path / "empty_missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    with pytest.raises(TbprobeError, match="no monitor scalars"):
        os.makedirs(tmp_path / "blank")
        export_run(str(tmp_path / "blank"), str(tmp_path / "o"))


def test_split_name():
    assert split_name("vp1:layers.0:micro2") == (1, "layers.0", 2)
    assert split_name("head.weight") == (0, "head.weight", 0)


@pytest.mark.peers
def test_reference_csv2tensorboard_reads_the_export(monitor_out, tmp_path):
    if not os.path.exists(PEER_PY):
        pytest.skip("peers not installed: run ../shared/peers/setup.sh")
    main(["monitor", "export-csv", str(monitor_out), "-o", str(tmp_path / "x")])
    script = (
        "from msprobe.pytorch.monitor.csv2tb import csv2tensorboard_by_step as f\n"
        f"f({str(tmp_path / 'x')!r}, output_dirpath={str(tmp_path / 'tb')!r})\n"
    )
    subprocess.run([PEER_PY, "-c", script], check=True, capture_output=True, timeout=120,
                   env=dict(os.environ, MONITOR_OUTPUT_DIR=str(tmp_path / "peer_out")))
    from tests.monitor.helpers import read_scalars

    s = read_scalars(str(tmp_path / "tb" / "rank0" / "grad_reduced"))
    ours = read_scalars(str(monitor_out / "rank0"))
    assert s["vp0:head.weight/norm"][1] == pytest.approx(ours["head.weight/grad_norm"][1], rel=1e-5)
    a = read_scalars(str(tmp_path / "tb" / "rank0" / "actv"))
    assert "vp0:layers.0.output:micro0/max" in a


def test_unreduced_gradients_per_micro_step_keep_the_micro_step_column(tmp_path):
    """With monitor_mbs_grad the unreduced gradients are recorded per micro step: the export wrote them without
    the micro_step column, two identical-looking rows per step, which the reference's csv2tensorboard refuses
    ("duplicated step")."""
    import numpy as np

    from tbprobe.monitor.writer import MonitorWriter

    run = tmp_path / "rank0"
    w = MonitorWriter(str(run), ["norm"], [], 0)
    for step in range(2):
        w.submit(step, ["fc.bias:micro0/grad_unreduced", "fc.bias:micro1/grad_unreduced", "fc.bias/grad"],
                 np.array([[1.0 + step], [2.0 + step], [3.0 + step]]))
    w.close()
    export_run(str(run), str(tmp_path / "csv"))
    rows = _rows(tmp_path / "csv" / "grad_unreduced_0-1.csv")
    assert rows[0] == ["vpp_stage", "name", "step", "micro_step", "norm", "shape", "dtype"]
    assert [r[1:5] for r in rows[1:]] == [["fc.bias", "0", "0", "1"], ["fc.bias", "0", "1", "2"],
                                          ["fc.bias", "1", "0", "2"], ["fc.bias", "1", "1", "3"]]
    # the reduced ones, one per step, keep the reference's columns
    assert _rows(tmp_path / "csv" / "grad_reduced_0-1.csv")[0] == ["vpp_stage", "name", "step", "norm", "shape",
                                                                   "dtype"]


def test_columns_follow_the_configs_order_of_ops(tmp_path):
    """The reference's CSV columns follow `ops` as the config lists them; the export always wrote OPS' order."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    order = ["min", "max", "norm", "zeros", "nans", "mean"]
    mon = TrainerMon(write_config(tmp_path, tmp_path / "out", targets={"head": {}}, xy_distribution=True,
                                  wg_distribution=True, ops=order + ["shape", "dtype"]))
    mon.set_monitor(model, opt)
    train(model, opt, 2, zero_last=False)
    mon.close()
    export_run(str(tmp_path / "out" / "rank0"), str(tmp_path / "csv"))
    for name in ("actv_0-1.csv", "actv_grad_0-1.csv", "grad_reduced_0-1.csv"):
        header = _rows(tmp_path / "csv" / name)[0]
        assert [c for c in header if c in order] == order, (name, header)
    grad = _rows(tmp_path / "csv" / "grad_reduced_0-1.csv")
    row = next(r for r in grad[1:] if r[1] == "head.weight" and r[2] == "1")
    assert float(row[3 + order.index("norm")]) == pytest.approx(model.head.weight.grad.norm().item(), rel=1e-5)


def _two_ranks(monitor_out, root):
    """A log folder of two ranks, copies of the real run."""
    import shutil
    for rank in ("rank0", "rank1"):
        shutil.copytree(monitor_out / "rank0", root / rank)
    return root


def _events(run):
    return [run / n for n in os.listdir(run) if ".tfevents." in n]


def test_a_rank_that_cannot_be_exported_leaves_no_output(monitor_out, tmp_path, capsys):
    """rank1's event file empty: the command failed after writing rank0's CSV files (half an export)."""
    logs = _two_ranks(monitor_out, tmp_path / "logs")
    for ev in _events(logs / "rank1"):
        ev.write_bytes(b"")
    out = tmp_path / "x"
    assert main(["monitor", "export-csv", str(logs), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"tbprobe: error: {logs / 'rank1'}: no monitor scalars to export\n"
    assert not out.exists()


def test_a_write_that_fails_removes_what_the_export_made_and_keeps_what_was_there(monitor_out, tmp_path,
                                                                                   monkeypatch, capsys):
    from tbprobe.monitor import csv_export
    logs = _two_ranks(monitor_out, tmp_path / "logs")
    out = tmp_path / "x"
    out.mkdir()
    (out / "earlier.csv").write_text("kept")
    (out / "STAMP-rank1-tbprobe").write_text("a file where rank1's folder goes")
    monkeypatch.setattr(csv_export.time, "strftime", lambda fmt: "STAMP")
    assert main(["monitor", "export-csv", str(logs), "-o", str(out)]) == 2
    assert "STAMP-rank1-tbprobe" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["STAMP-rank1-tbprobe", "earlier.csv"]   # rank0's folder and files gone


def test_a_hand_edited_meta_or_an_output_path_under_a_file_is_no_traceback(monitor_out, tmp_path, capsys):
    logs = _two_ranks(monitor_out, tmp_path / "logs")
    (logs / "rank0" / "monitor_meta.json").write_text('{"shapes": [1, 2], "ops_order": 5}')
    (logs / "rank1" / "monitor_meta.json").write_text('{"shapes": {"x": 5}}')
    assert main(["monitor", "export-csv", str(logs), "-o", str(tmp_path / "x")]) == 0, capsys.readouterr().err
    rows = _rows(glob.glob(str(tmp_path / "x" / "*-rank0-tbprobe" / "actv_0-2.csv"))[0])
    assert rows[1][-2:] == ["nan", "nan"]       # no shape for it, as for a run without a meta file
    afile = tmp_path / "afile"
    afile.write_text("x")
    capsys.readouterr()
    assert main(["monitor", "export-csv", str(logs), "-o", str(afile / "sub")]) == 2
    assert capsys.readouterr().err == f"tbprobe: error: {afile / 'sub'}: cannot write there ({afile} is not a folder)\n"


def test_a_fifo_named_like_an_event_file_is_refused_not_waited_on(monitor_out, tmp_path):
    import sys
    logs = _two_ranks(monitor_out, tmp_path / "logs")
    fifo = _events(logs / "rank1")[0]
    fifo.unlink()
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "tbprobe", "monitor", "export-csv", str(logs), "-o",
                           str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr == (f"tbprobe: error: {fifo}: not a regular file (a FIFO, a device or "
                                                    "a socket), not an event file\n")
    assert not (tmp_path / "x").exists()
