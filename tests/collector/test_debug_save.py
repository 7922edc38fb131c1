"""Level debug: save() writes debug.json alone, one `<name>.<n>.debug` record per call in the step and its
`<name>_grad.<n>.debug` mirror filled by backward (namedtuples and dataclasses by field); bad arguments are
skipped with one warning, as the reference does."""
import json
import logging
import os

import torch
from conftest import rank_dirs

from tbprobe import PrecisionDebugger


def _debug_json(tmp_path, step=0):
    (rank,) = rank_dirs(str(tmp_path / "dump"), step)
    assert sorted(os.listdir(rank)) == ["debug.json"]      # the reference's level debug: debug.json alone
    with open(os.path.join(rank, "debug.json")) as f:
        return json.load(f)


def test_debug_level_save(tmp_path):
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0, 1])
    t = torch.arange(4.0)
    dbg.save(t, "activations")
    dbg.save({"w": t * 2}, "activations", save_backward=False)
    dbg.step()
    dbg.save(t, "activations")
    dbg.step()
    dbg.close()
    doc = _debug_json(tmp_path)
    assert {k: doc[k] for k in ("task", "level", "framework")} == {"task": "statistics", "level": "debug",
                                                                   "framework": "pytorch"}
    data = doc["data"]
    assert list(data) == ["activations.0.debug", "activations_grad.0.debug", "activations.1.debug"]
    assert data["activations.0.debug"]["Max"] == 3.0
    assert data["activations_grad.0.debug"] is None           # t does not require grad
    assert data["activations.1.debug"]["w"]["Max"] == 6.0
    assert list(_debug_json(tmp_path, 1)["data"]) == ["activations.0.debug", "activations_grad.0.debug"]


def test_debug_level_save_backward(tmp_path):
    """`<name>_grad.<n>.debug` mirrors the saved value with null leaves; backward fills each leaf whose tensor
    gets a gradient, and the hooks go when the step ends."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0, 1])
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for _ in range(2):
        h = w * 2
        dbg.save({"h": h, "k": 3, "plain": torch.ones(2), "l": [h * 3, 7]}, "mixed")
        dbg.save(w, "leaf")
        (h ** 2).sum().backward()        # d/dw sum((2w)^2) = 8w
        dbg.save(h, "late")              # after the backward: no gradient comes
        dbg.step()
        w.grad = None
    dbg.close()
    assert dbg.hook_errors == 0
    assert not w._backward_hooks                     # each step's hooks went with it
    data = _debug_json(tmp_path, 1)["data"]
    grad = data["mixed_grad.0.debug"]
    assert grad["h"]["Max"] == 12.0 and grad["h"]["Min"] == -8.0      # dL/dh = 2h
    assert grad["h"]["requires_grad"] is False
    assert (grad["k"], grad["plain"], grad["l"]) == (None, None, [None, None])
    assert data["leaf_grad.0.debug"]["Max"] == 24.0 and data["leaf_grad.0.debug"]["Min"] == -16.0
    assert data["late_grad.0.debug"] is None


def test_debug_level_save_with_bad_arguments_skips_them_with_one_warning(tmp_path, caplog):
    """save(x, 3) raised a TbprobeError into the training loop; msprobe warns and skips a non-str name and a
    non-bool save_backward. Now both are skipped, with one warning per kind, and the good calls are saved."""
    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0])
    x = torch.ones(2)
    with caplog.at_level(logging.WARNING, logger="tbprobe.collector"):
        for _ in range(2):
            dbg.save(x, 3)
            dbg.save(x, "x", save_backward="yes")
        dbg.save(x, "kept")
    dbg.step()
    dbg.close()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and "name must be a str" in warned[0] and "save_backward" in warned[1]
    assert sorted(_debug_json(tmp_path, 0)["data"]) == ["kept.0.debug", "kept_grad.0.debug"]


def test_debug_level_save_backward_of_a_namedtuple_and_a_dataclass(tmp_path):
    """Their forward entries are dicts of their fields, as msprobe writes them; the gradient entry was a list (a
    namedtuple) or null with no gradient ever recorded (a dataclass)."""
    import collections
    import dataclasses

    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Out:
        a: torch.Tensor
        b: int

    dbg = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="debug", step=[0])
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = w * 2
    dbg.save(Pair(h, 3), "nt")
    dbg.save(Out(h, 4), "dc")
    (h ** 2).sum().backward()
    dbg.step()
    dbg.close()
    assert dbg.hook_errors == 0
    data = _debug_json(tmp_path, 0)["data"]
    for name in ("nt", "dc"):
        assert sorted(data[f"{name}.0.debug"]) == ["a", "b"]
        grad = data[f"{name}_grad.0.debug"]
        assert sorted(grad) == ["a", "b"] and grad["b"] is None
        assert grad["a"]["Max"] == 12.0 and grad["a"]["Min"] == -8.0
