"""A tensor-mode compare reads only the dump's own tensor files: a data_name that leads out of the rank's
dump_tensor_data (absolute, `..`, a link to elsewhere), a recorded dump_data_dir pointing anywhere, a FIFO or a
device is refused with a message in the item's row, never read, never waited on."""
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from tbprobe.cli import main
from tests.graph_builder import golden

F = golden.INPUTS
ITEM = "Functional.linear.0.forward"
ROOT = Path(__file__).resolve().parents[2]


def _debug_copy(tmp_path: Path, data_name=None, data_dir=None) -> Path:
    """A copy of the npu_tensor dump whose ITEM input 0 names `data_name` (and whose dump_data_dir is
    `data_dir`); returns the rank folder."""
    shutil.copytree(F / "npu_tensor", tmp_path / "npu")
    rank = tmp_path / "npu" / "step0" / "rank0"
    doc = json.loads((rank / "dump.json").read_text())
    if data_name is not None:
        doc["data"][ITEM]["input_args"][0]["data_name"] = data_name
    if data_dir is not None:
        doc["dump_data_dir"] = data_dir
    (rank / "dump.json").write_text(json.dumps(doc))
    return rank


def _secret(tmp_path: Path) -> Path:
    """A tensor outside the dump, of the item's shape and dtype: read, it gives MaxAbsErr about 40."""
    folder = tmp_path / "secret"
    folder.mkdir()
    np.save(folder / "x.npy", np.full((3, 4), 42.0, dtype=np.float32))
    return folder


def _row(out: Path) -> dict:
    rows = list(csv.DictReader(next(out.glob("compare_result_*.csv")).open()))
    return next(r for r in rows if r["NPU Name"] == ITEM + ".input.0")


def _compare(tmp_path: Path, capsys, name: str) -> dict:
    out = tmp_path / name
    assert main(["compare", "-tp", str(tmp_path / "npu"), "-gp", str(F / "bench_tensor"), "-o", str(out)]) == 0
    capsys.readouterr()
    return _row(out)


def test_a_data_name_outside_the_tensor_folder_is_not_read(tmp_path, capsys):
    secret = _secret(tmp_path)
    rank = _debug_copy(tmp_path, "../../../../secret/x.npy")
    tensors = rank / "dump_tensor_data"
    cases = {
        "relative": ("../../../../secret/x.npy", "leaves the dump's tensor folder"),
        "absolute": (str(secret / "x.npy"), "is an absolute path: it leaves the dump's tensor folder"),
        "link": ("link.npy", "leaves the dump's tensor folder"),   # a link inside that points outside
        "folder": (".", "leaves the dump's tensor folder"),
    }
    os.symlink(secret / "x.npy", tensors / "link.npy")
    for case, (name, why) in cases.items():
        doc = json.loads((rank / "dump.json").read_text())
        doc["data"][ITEM]["input_args"][0]["data_name"] = name
        (rank / "dump.json").write_text(json.dumps(doc))
        row = _compare(tmp_path, capsys, case)
        assert row["MaxAbsErr"] == "N/A", case
        assert f"warning: cannot read tensor data: NPU data_name {name!r} {why}" in row["Err_message"], case
        assert row["Result"] == "warning", case
    # a link that stays inside the folder is followed
    os.symlink(tensors / "Functional.linear.0.forward.input.0.pt", tensors / "inside.pt")
    doc = json.loads((rank / "dump.json").read_text())
    doc["data"][ITEM]["input_args"][0]["data_name"] = "inside.pt"
    (rank / "dump.json").write_text(json.dumps(doc))
    row = _compare(tmp_path, capsys, "inside")
    assert row["MaxAbsErr"] == "0.0" and row["Err_message"] == "[]"


def test_a_recorded_dump_data_dir_elsewhere_is_not_used(tmp_path, capsys):
    """dump_data_dir, as msprobe writes it, is the tensor folder's path on the dumping machine: the compare reads
    the rank folder's own dump_tensor_data whatever it says (it read a recorded folder that existed here)."""
    secret = _secret(tmp_path)
    _debug_copy(tmp_path, "x.npy", data_dir=str(secret))
    row = _compare(tmp_path, capsys, "out")
    assert row["MaxAbsErr"] == "N/A"
    assert "warning: tensor file not found: " in row["Err_message"]
    assert str(tmp_path / "npu" / "step0" / "rank0" / "dump_tensor_data" / "x.npy") in row["Err_message"]


def test_a_fifo_or_a_device_is_refused_without_waiting(tmp_path):
    """A FIFO among the tensors blocked the compare for ever; /dev/zero (by absolute name) grew it until it was
    killed. In a child process with a time limit and an address-space cap, so a regression fails, not hangs."""
    rank = _debug_copy(tmp_path, "fifo.pt")
    os.mkfifo(rank / "dump_tensor_data" / "fifo.pt")
    doc = json.loads((rank / "dump.json").read_text())
    doc["data"][ITEM]["input_args"][1]["data_name"] = "/dev/zero"
    (rank / "dump.json").write_text(json.dumps(doc))
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
            "from tbprobe.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "compare", "-tp", str(tmp_path / "npu"), "-gp",
                           str(F / "bench_tensor"), "-o", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    rows = list(csv.DictReader(next((tmp_path / "out").glob("compare_result_*.csv")).open()))
    by_name = {r["NPU Name"]: r for r in rows}
    fifo, zero = by_name[ITEM + ".input.0"], by_name[ITEM + ".input.1"]
    assert "warning: cannot read tensor data: fifo.pt: not a regular file (a FIFO)" in fifo["Err_message"]
    assert "NPU data_name '/dev/zero' is an absolute path" in zero["Err_message"]
    assert fifo["MaxAbsErr"] == zero["MaxAbsErr"] == "N/A"
