"""Per-item metrics and rules on small hand-made cases."""
import json

import numpy as np

from tbprobe.graph_builder.compare import compare_entries
from tbprobe.graph_builder.metrics import stat_fields, tensor_metrics
from tests.graph_builder import synth

T = synth.tensor


def test_stat_fields_formats():
    fields, nre = stat_fields(T((2,), mx=2.0, mn=0.0, mean=1.5, norm=3.0), T((2,), mx=1.0, mn=0.0, mean=1.0, norm=3.0))
    assert fields["Max diff"] == "1.0" and fields["MaxRelativeErr"] == "100.0%"
    assert fields["MinRelativeErr"] == "N/A"                 # bench 0
    assert fields["MeanRelativeErr"] == "50.0%"
    assert fields["NormRelativeErr"] == "0.0%" and nre == 0.0
    fields, _ = stat_fields({"type": "bool", "value": True}, {"type": "bool", "value": True})
    assert set(fields.values()) == {"N/A"}
    fields, _ = stat_fields({"type": "int", "value": 3}, {"type": "int", "value": 2})
    assert fields["Max diff"] == "1" and fields["MaxRelativeErr"] == "50.0%"


def _save(tmp_path, name, arr):
    path = tmp_path / name
    np.save(path, np.asarray(arr, dtype=np.float32))
    return str(path)


def test_tensor_metrics_values_and_edge_cases(tmp_path):
    a = _save(tmp_path, "a.npy", [1.0, 2.0, 0.0, 4.0])
    b = _save(tmp_path, "b.npy", [1.0, 2.0, 0.5, 4.0])
    fields, msg = tensor_metrics(a, b)
    assert msg is None
    assert fields["MaxAbsErr"] == "0.5" and fields["One Thousandth Err Ratio"] == "0.75"
    assert float(fields["Cosine"]) < 1.0 and float(fields["EucDist"]) == 0.5
    z1, z2 = _save(tmp_path, "z1.npy", [0.0, 0.0]), _save(tmp_path, "z2.npy", [0.0, 0.0])
    assert tensor_metrics(z1, z2)[0]["Cosine"] == "1.0"
    nan1 = _save(tmp_path, "n1.npy", [np.nan, 1.0])
    nan2 = _save(tmp_path, "n2.npy", [np.nan, 1.0])
    nan3 = _save(tmp_path, "n3.npy", [1.0, np.nan])
    assert tensor_metrics(nan1, nan2)[0]["MaxAbsErr"] == "0.0"          # same positions: zeroed
    fields, msg = tensor_metrics(nan1, nan3)
    assert fields["Cosine"] == "N/A" and msg.startswith("error")
    s1, s2 = _save(tmp_path, "s1.npy", 2.0), _save(tmp_path, "s2.npy", 1.0)
    fields, _ = tensor_metrics(s1, s2)
    assert fields["Cosine"] == "unsupported" and fields["MaxAbsErr"] == "1.0"
    assert tensor_metrics(a, str(tmp_path / "missing.npy"))[1].startswith("warning")


def test_tensor_metrics_of_empty_tensors_and_special_values_in_place(tmp_path):
    # an empty tensor on both sides: nothing differs, a pass as in the reference (was a warning, a yellow node)
    e1, e2 = _save(tmp_path, "e1.npy", np.zeros((0, 4))), _save(tmp_path, "e2.npy", np.zeros((0, 4)))
    assert tensor_metrics(e1, e2)[1] is None
    # +inf against -inf at one position: the values differ, the positions do not (the message said they did)
    i1, i2 = _save(tmp_path, "i1.npy", [np.inf, 1.0]), _save(tmp_path, "i2.npy", [-np.inf, 1.0])
    assert tensor_metrics(i1, i2)[1] == ("error: NaN/Inf of different values at the same positions in NPU and "
                                         "bench tensors.")
    n3 = _save(tmp_path, "n3.npy", [1.0, np.nan])
    assert "different positions" in tensor_metrics(i1, n3)[1]


def test_md5_mode_and_exempt_apis():
    d = {"input_args": [dict(T((2,)), md5="aaaa0000")], "input_kwargs": {}, "output": [dict(T((2,)), md5="1")]}
    b = {"input_args": [dict(T((2,)), md5="aaaa0000")], "input_kwargs": {}, "output": [dict(T((2,)), md5="2")]}
    res = compare_entries("Torch.add.0.forward", d, "Torch.add.0.forward", b, "md5")
    assert res.precision == 1
    out = json.loads(res.output_text)["Torch.add.0.forward.output.0"]
    assert list(out)[-3:] == ["Result", "Requires_grad Consistent", "Err_message"] and out["Result"] == "error"
    res = compare_entries("Torch.empty_like.0.forward", d, "Torch.empty_like.0.forward", b, "md5")
    assert res.precision == 0   # uninitialised memory: never an error


def test_statistics_rules():
    def entry(in_norm, out_norm, dtype="torch.float32"):
        return {"input_args": [T((4,), norm=in_norm)], "input_kwargs": {}, "output": [T((4,), norm=out_norm, dtype=dtype)]}
    name = "Torch.mul.0.forward"
    assert compare_entries(name, entry(1.0, 1.0), name, entry(1.0, 1.0), "statistics").precision == 0
    assert compare_entries(name, entry(1.0, 2.0), name, entry(1.0, 1.0), "statistics").precision == 1
    assert compare_entries(name, entry(1.02, 1.5), name, entry(1.0, 1.0), "statistics").precision == 0.5
    # two floating-point dtypes (mixed precision) are graded by the numbers, with a note; --strict-dtype: an error
    res = compare_entries(name, entry(1.0, 1.0, "torch.bfloat16"), name, entry(1.0, 1.0), "statistics")
    assert res.precision == 0 and "mixed precision" in res.output_text
    assert compare_entries(name, entry(1.0, 1.0, "torch.bfloat16"), name, entry(1.0, 1.0), "statistics",
                           strict_dtype=True).precision == 1
    assert compare_entries(name, entry(1.0, 1.0, "torch.int64"), name, entry(1.0, 1.0),
                           "statistics").precision == 1
