"""A manual match is compared again as the build graded the file: `tbprobe graph --strict-dtype` makes a bf16 vs
fp32 pair an error, and the plugin's re-compare (the /api/match answer, the rows /api/apply writes) said "note:
mixed precision" for it, the flag not being in the file. Files without the setting (older tbprobe's, the
reference's) are graded by the default."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.graph_builder import synth
from tests.tb_plugin.conftest import make_api, sql

LINEAR = "Functional.linear.0.forward"
DTYPE_ERROR = "The dtype of NPU differs"


def _rank(folder, dtype: str) -> None:
    """One linear call; the two runs differ in nothing but the dtype of every tensor."""
    t = lambda shape, norm: synth.tensor(shape, norm=norm, dtype=dtype)  # noqa: E731
    data = {LINEAR: dict(synth.api_entry([t((2, 4), 2.0)], [t((2, 3), 1.5)]),
                         parameters={"weight": t((3, 4), 1.0)})}
    synth.simple_rank(folder, data, {LINEAR: None})


def _built(tmp_path, strict: bool) -> str:
    """`tbprobe graph` of a bf16 run against an fp32 one into tmp_path/logs; the database's file name."""
    _rank(tmp_path / "bf16", "torch.bfloat16")
    _rank(tmp_path / "fp32", "torch.float32")
    out = tmp_path / "logs"
    proc = subprocess.run([sys.executable, "-m", "tbprobe", "graph", "-tp", str(tmp_path / "bf16"), "-gp",
                           str(tmp_path / "fp32"), "-o", str(out), "--serial", "-q"]
                          + (["--strict-dtype"] if strict else []), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-500:]
    (name,) = [n for n in os.listdir(out) if n.endswith(".vis.db")]
    return name


def _output_message(path) -> str:
    (text,), = sql(path, "SELECT output_data FROM tb_nodes WHERE data_source = 'NPU' AND node_name = ?", (LINEAR,))
    return json.loads(text)[LINEAR + ".output.0"]["Err_message"]


def _rematch(tmp_path, file):
    """The manual match of the pair (the builder's own, matched again by hand: compared again by the plugin),
    then its apply; (the match's precision for the debug node, the meta, the applied row's output message)."""
    api = make_api(tmp_path / "logs")
    _, meta = api.get("/api/meta", run=".", file=file)
    status, body = api.post("/api/match", dict(run=".", file=file, step=0, rank=0, debug=LINEAR, bench=LINEAR,
                                               descendants=False))
    assert status == 200, body
    changed = {(c["side"], c["name"]): c for c in body["changed"]}
    debug = changed[("NPU", LINEAR)]
    assert debug["matched"] is True and debug["manual"] is True
    status, body = api.post("/api/apply", dict(run=".", file=file))
    assert status == 200, body
    return debug["precision"], meta, _output_message(tmp_path / "logs" / file)


def test_a_strict_dtype_file_rematched_by_hand_keeps_the_dtype_error(tmp_path):
    file = _built(tmp_path, strict=True)
    assert "error: " + DTYPE_ERROR in _output_message(tmp_path / "logs" / file)   # (as built)
    precision, meta, message = _rematch(tmp_path, file)
    assert precision == 1.0
    # the rows the apply wrote are the re-compare's: still the error, not the mixed-precision note
    assert "error: " + DTYPE_ERROR in message and "mixed precision" not in message, message
    (stored,) = sql(tmp_path / "logs" / file,
                     "SELECT precision_index FROM tb_nodes WHERE data_source = 'NPU' AND node_name = ?", (LINEAR,))
    assert stored == (1.0,), stored
    assert meta["strict_dtype"] is True


def test_by_default_a_rematched_dtype_difference_is_a_note(tmp_path):
    file = _built(tmp_path, strict=False)
    precision, meta, message = _rematch(tmp_path, file)
    assert precision == 0.0
    assert "note: " + DTYPE_ERROR in message and "mixed precision" in message and "error" not in message, message
    assert meta["strict_dtype"] is False


@pytest.mark.parametrize("value", [None, "0"])
def test_a_file_without_the_setting_is_graded_by_the_default(tmp_path, value):
    """A strict build whose meta row is gone (None: a file of tbprobe before the row, like the reference's, which
    have no tbprobe_meta at all) or says '0' is compared again by the default rule."""
    file = _built(tmp_path, strict=True)
    with sqlite3.connect(tmp_path / "logs" / file) as conn:
        if value is None:
            conn.execute("DELETE FROM tbprobe_meta WHERE key = 'strict_dtype'")
        else:
            conn.execute("UPDATE tbprobe_meta SET value = ? WHERE key = 'strict_dtype'", (value,))
    conn.close()
    precision, meta, message = _rematch(tmp_path, file)
    assert precision == 0.0 and "mixed precision" in message and "error" not in message, message
    assert meta["strict_dtype"] is False


def test_the_reference_files_say_they_were_graded_by_the_default(api, logdir):
    from tests.tb_plugin.conftest import db_file

    run, file = db_file(logdir, "cmp_stat")
    status, meta = api.get("/api/meta", run=run, file=file)
    assert status == 200 and meta["writer"] == "msprobe" and meta["strict_dtype"] is False
