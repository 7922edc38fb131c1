"""Regenerate tests/collector/golden/*.json from msprobe's own dumps of the test models.

usage: python tests/collector/make_golden.py [PEER_PYTHON [MODEL]]   (default /tmp/peers/msprobe/bin/python)
Each golden file holds the node-name sets of one msprobe dump: dump.json keys, construct.json keys, stack names.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [(m, lv) for m in ("mlp", "conv", "gpt", "llama", "tp") for lv in ("L0", "L1", "mix")]


def node_sets(dump_dir: str) -> dict:
    rank_dir = sorted(glob.glob(os.path.join(dump_dir, "step0", "*")))[0]
    with open(os.path.join(rank_dir, "dump.json")) as f:
        dump = json.load(f)["data"]
    with open(os.path.join(rank_dir, "construct.json")) as f:
        construct = json.load(f)
    with open(os.path.join(rank_dir, "stack.json")) as f:
        stack = json.load(f)
    return {"dump": sorted(dump), "construct": sorted(construct),
            "stack": sorted(n for names, _ in stack.values() for n in names)}


def run_msprobe(python: str, model: str, level: str, out: str) -> None:
    subprocess.run([python, os.path.join(HERE, "run_model.py"), "msprobe", model, level, out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)


def main() -> None:
    python = sys.argv[1] if len(sys.argv) > 1 else "/tmp/peers/msprobe/bin/python"
    only = sys.argv[2] if len(sys.argv) > 2 else None    # one model's files alone (`... PEER_PYTHON tp`)
    os.makedirs(os.path.join(HERE, "golden"), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model, level in CASES:
            if only is not None and model != only:
                continue
            out = os.path.join(tmp, f"{model}_{level}")
            run_msprobe(python, model, level, out)
            with open(os.path.join(HERE, "golden", f"{model}_{level}.json"), "w") as f:
                json.dump(node_sets(out), f, indent=1)
            print("wrote", model, level)


if __name__ == "__main__":
    main()
