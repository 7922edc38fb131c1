"""The benchmark's generated dump (bench/parse_dump.py) is a valid msprobe-layout dump that every reader agrees on,
read here in many small blocks so the lazy fast path crosses block boundaries hundreds of times."""
import importlib.util
import json
import math
from pathlib import Path

from tbprobe.formats import dump_json
from tbprobe.formats.dump_json import iter_tensor_items, load_dump

BENCH = Path(__file__).resolve().parents[2] / "bench" / "parse_dump.py"


def _bench():
    spec = importlib.util.spec_from_file_location("parse_dump_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_dump_reads_the_same_every_way(tmp_path, monkeypatch):
    path = tmp_path / "dump.json"
    n = _bench().generate(path, 0.4)
    expected = json.loads(path.read_text())["data"]
    assert len(expected) == n > 100
    monkeypatch.setattr(dump_json, "_BLOCK", 4096)
    lazy = load_dump(path)
    eager = load_dump(path, lazy=False)
    assert list(lazy.entries) == list(eager.entries) == list(expected)
    for name, entry in lazy.entries.items():
        assert json.dumps(entry, sort_keys=False) == json.dumps(expected[name], sort_keys=False)
    names = list(expected)
    assert names[0].startswith("Functional.layer_norm.0.forward")
    assert "Module.module.module.language_model.encoder.layers.0.self_attention.ParallelAttention.forward.0" in names
    assert any(name.endswith(".backward") or ".backward." in name for name in names)
    stats = [it.get("Max") for e in eager.entries.values() for _, it in iter_tensor_items(e)]
    assert all(isinstance(v, float) for v in stats)
    nonfinite = sum(1 for v in stats if not math.isfinite(v))
    assert 0 < nonfinite < len(stats) / 50
