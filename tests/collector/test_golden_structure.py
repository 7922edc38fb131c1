"""tbprobe's dump of the test models has the same nodes as msprobe's own dump of them (golden node sets made by
make_golden.py from msprobe 26.2.0), except the documented deliberate differences."""
import json
import os

import pytest
from conftest import load_rank, make_debugger, rank_dirs
from run_model import train

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")

# msprobe loses the backward of a module whose output feeds an in-place module (ReLU(inplace=True)): its full
# backward hook cannot follow the in-place change. tbprobe records them (docs/compatibility.md, ## Collector).
EXTRA = {
    ("conv", "L0"): {"dump": {"Module.bn.BatchNorm2d.backward.0", "Module.relu.ReLU.backward.0"},
                     "construct": {"Module.bn.BatchNorm2d.backward.0"}},
    ("conv", "mix"): {"dump": {"Module.bn.BatchNorm2d.backward.0", "Module.relu.ReLU.backward.0"},
                      "construct": {"Module.bn.BatchNorm2d.backward.0"}},
}


def node_sets(rank_dir):
    r = load_rank(rank_dir)
    return {"dump": set(r["dump"]["data"]), "construct": set(r["construct"]),
            "stack": {n for names, _ in r["stack"].values() for n in names}}


# tp: column-parallel layers through a custom Function that returns its input as it is, whose view_as autograd
# makes msprobe records at mix (tbprobe left it out), and a user's full backward hook, whose view_as neither records
@pytest.mark.parametrize("model", ["mlp", "conv", "gpt", "llama", "tp"])
@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_same_nodes_as_msprobe(tmp_path, model, level):
    with open(os.path.join(GOLDEN, f"{model}_{level}.json")) as f:
        golden = {k: set(v) for k, v in json.load(f).items()}
    dbg = make_debugger(tmp_path, level=level)
    train(dbg, model, steps=1)
    dbg.close()
    dirs = rank_dirs(str(tmp_path / "dump"))
    assert len(dirs) == 1 and os.path.basename(dirs[0]).startswith("proc")
    ours = node_sets(dirs[0])
    extra = EXTRA.get((model, level), {})
    for kind in ("dump", "construct", "stack"):
        assert golden[kind] - ours[kind] == set(), f"{kind}: nodes msprobe has and tbprobe lacks"
        assert ours[kind] - golden[kind] == extra.get(kind, set()), f"{kind}: unexpected extra nodes"


def test_reference_layout_and_item_order(tmp_path):
    dbg = make_debugger(tmp_path, level="mix")
    train(dbg, "mlp", steps=1)
    dbg.close()
    r = load_rank(rank_dirs(str(tmp_path / "dump"))[0])
    assert list(r["dump"]) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert r["dump"]["framework"] == "pytorch" and r["dump"]["level"] == "mix"
    entry = r["dump"]["data"]["Module.fc1.Linear.forward.0"]
    assert list(entry) == ["input_args", "input_kwargs", "output", "parameters"]
    item = entry["parameters"]["weight"]
    assert list(item)[:8] == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"]
    assert item["type"] == "torch.Tensor" and item["dtype"] == "torch.float32" and item["shape"] == [16, 8]
    bw = r["dump"]["data"]["Module.fc1.Linear.backward.0"]
    assert list(bw) == ["input", "output"]
    grads = r["dump"]["data"]["Module.fc1.Linear.parameters_grad.0"]
    assert set(grads) == {"weight", "bias"} and grads["weight"][0]["shape"] == [16, 8]
    # optimizer work under the pseudo parent, modules top level, APIs under their module
    assert r["construct"]["optimizer"] is None
    assert r["construct"]["Tensor.add_.0.forward"] == "optimizer"
    assert r["construct"]["Functional.linear.0.forward"] == "Module.fc1.Linear.forward.0"
    assert r["construct"]["Functional.linear.0.backward"] == "Module.fc1.Linear.backward.0"
    # stack.json new form: {"0": [[names], [lines]]}
    first = next(iter(r["stack"].values()))
    assert isinstance(first[0], list) and first[1][0].startswith("File ")
    assert not any("tbprobe/collector" in line for _, lines in r["stack"].values() for line in lines)
