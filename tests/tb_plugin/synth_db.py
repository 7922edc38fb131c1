"""Synthetic ``.vis.db`` files in the reference schema, for tests and bench/plugin_bench.py.

``make_compare_db`` writes a compare database with a given number of nodes per side and one module holding
``big_children`` API children (the case that costs the reference plugin 8 MB per click); ``make_names_db`` writes a
single-graph database with many names and no tensor data (the search benchmark). Both are deterministic.
"""
import json
import os
import random
import sqlite3
from typing import List, Optional, Sequence, Tuple

__all__ = ["SCHEMA_SQL", "make_compare_db", "make_names_db", "make_chain_db", "chain_name", "XSS_NAME"]

SCHEMA_SQL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "msprobe-26.2.0", "schema.sql")
XSS_NAME = "<img src=x onerror=alert(1)>"

_NODE_COLORS = {
    "#FFFCF3": {"value": [0, 0.3], "description": "pass", "accuracy_level": "pass"},
    "#FFDC7F": {"value": [0.3, 0.6], "description": "warning", "accuracy_level": "warning"},
    "#FF704D": {"value": [0.6, 1], "description": "error", "accuracy_level": "error"},
    "#C7C7C7": {"value": [], "description": "unmatched", "accuracy_level": "unmatched node"},
}


def _schema(conn: sqlite3.Connection) -> None:
    with open(SCHEMA_SQL, "r", encoding="utf-8") as f:
        conn.executescript(f.read())


def _tree(n_nodes: int, big_children: int, extra_names: Sequence[str]) -> List[Tuple[str, Optional[str], int]]:
    """(name, parent, type) in post-order: a big module, then blocks of 50 APIs until n_nodes is reached."""
    out: List[Tuple[str, Optional[str], int]] = []
    big = "Module.big.Big.forward.0"
    api = 0
    for _ in range(big_children):
        out.append((f"Torch.matmul.{api}.forward", big, 1))
        api += 1
    out.append((big, "DefaultModel", 0))
    for name in extra_names:
        out.append((name, "DefaultModel", 1))
    layer = 0
    while len(out) < n_nodes - 1:
        block = f"Module.layers.{layer}.Block.forward.0"
        for _ in range(min(50, max(0, n_nodes - 2 - len(out)))):
            out.append((f"Functional.linear.{api}.forward", block, 1))
            api += 1
        out.append((block, "DefaultModel", 0))
        layer += 1
    out.append(("DefaultModel", None, 0))
    return out


def _data(name: str, rng: random.Random, compare: bool) -> Tuple[str, str]:
    def item(key: str) -> dict:
        d = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": "[4, 8]",
             "Max": f"{rng.random() * 4:.6f}", "Min": f"{-rng.random():.6f}", "Mean": f"{rng.random():.6f}",
             "Norm": f"{rng.random() * 10:.6f}", "requires_grad": "False", "data_name": "-1"}
        if compare:
            err = rng.random() ** 4
            d.update({"Max diff": f"{err:.6f}", "Min diff": "0.0", "Mean diff": f"{err / 3:.6f}",
                      "L2norm diff": f"{err / 2:.6f}", "MaxRelativeErr": f"{err * 100:.6f}%",
                      "MinRelativeErr": "0.0%", "MeanRelativeErr": f"{err * 33:.6f}%",
                      "NormRelativeErr": f"{err * 50:.6f}%", "Requires_grad Consistent": "True",
                      "Result": "pass", "Err_message": "[]"})
        return d
    return (json.dumps({f"{name}.input.0": item(f"{name}.input.0")}),
            json.dumps({f"{name}.output.0": item(f"{name}.output.0")}))


def make_compare_db(path: str, n_nodes: int = 100_000, big_children: int = 20_000,
                    extra_names: Sequence[str] = (XSS_NAME,), with_data: bool = True, seed: int = 0,
                    compare: bool = True) -> str:
    """A compare (or, with compare=False, build) database with ``n_nodes`` nodes per side."""
    rng = random.Random(seed)
    tree = _tree(n_nodes, big_children, extra_names)
    if os.path.exists(path):
        os.unlink(path)
    conn = sqlite3.connect(path)
    _schema(conn)
    sides = ("NPU", "Bench") if compare else ("NPU",)
    children = {}
    for name, parent, _ in tree:
        if parent is not None:
            children.setdefault(parent, []).append(name)
    ancestors = {"DefaultModel": ["DefaultModel"]}
    for name, parent, _ in reversed(tree):  # parents come after children in post-order
        if parent is not None:
            ancestors[name] = ancestors[parent] + [name]
    for side in sides:
        rows = []
        for order, (name, parent, ntype) in enumerate(tree):
            precision = None
            overflow = None
            if side == "NPU" and compare:
                r = rng.random()
                precision = 1 if r < 0.01 else (0.5 if r < 0.03 else 0)
            if rng.random() < 0.002:
                overflow = rng.choice(["medium", "high", "critical"])
            inp, outp = _data(name, rng, compare and side == "NPU") if with_data else ("", "")
            kids = children.get(name)
            link = json.dumps(ancestors[name]) if compare else "[]"
            rows.append((f"{side}_0_0_{name}", f"{side}_0_0", order, name, str(ntype), parent or "",
                         json.dumps(kids) if kids else "", precision, overflow, 0, link,
                         f"{side}_0_0_0", "", "{}", 0, inp, outp, side, None, 0, 0, 0))
        conn.executemany("INSERT INTO tb_nodes VALUES (" + ",".join("?" * 22) + ")", rows)
        conn.execute("INSERT INTO tb_stack VALUES (?, ?)",
                     (f"{side}_0_0_0", json.dumps(["File train.py, line 1, in <module>, \n model(x)"])))
    conn.execute("INSERT INTO tb_config VALUES ('1', ?, 'summary', '{}', 1, 1, ?, '[0]', '[0]')",
                 ("compare" if compare else "build", json.dumps(_NODE_COLORS)))
    conn.commit()
    conn.close()
    return path


def make_names_db(path: str, n_nodes: int = 1_000_000) -> str:
    """A build database with ``n_nodes`` names under 1000 modules and no tensor data (for the search benchmark)."""
    if os.path.exists(path):
        os.unlink(path)
    conn = sqlite3.connect(path)
    _schema(conn)
    per = max(1, n_nodes // 1000)

    def rows():
        order = 0
        api = 0
        for m in range(1000):
            module = f"Module.decoder.layers.{m}.mlp.MLP.forward.0"
            for _ in range(per - 1):
                name = f"Torch.matmul.{api}.forward"
                api += 1
                yield (f"NPU_0_0_{name}", "NPU_0_0", order, name, "1", module, "", None, None, 0, "[]", "", "",
                       "{}", 0, "", "", "NPU", None, 0, 0, 0)
                order += 1
            yield (f"NPU_0_0_{module}", "NPU_0_0", order, module, "0", "DefaultModel", "", None, None, 0, "[]",
                   "", "", "{}", 0, "", "", "NPU", None, 0, 0, 0)
            order += 1
        yield ("NPU_0_0_DefaultModel", "NPU_0_0", order, "DefaultModel", "0", "", "", None, None, 0, "[]", "",
               "", "{}", 0, "", "", "NPU", None, 0, 0, 0)

    conn.executemany("INSERT INTO tb_nodes VALUES (" + ",".join("?" * 22) + ")", rows())
    conn.execute("INSERT INTO tb_config VALUES ('1', 'build', 'summary', '{}', 1, 0, ?, '[0]', '[0]')",
                 (json.dumps(_NODE_COLORS),))
    conn.commit()
    conn.close()
    return path


def chain_name(level: int) -> str:
    return f"Module.d{level}.L.forward.0"


def make_chain_db(path: str, depth: int = 5000) -> str:
    """A build database whose graph is one chain of ``depth`` modules nested in each other under DefaultModel,
    ``chain_name(depth - 1)`` the deepest (a hostile or generated file: the page walked such paths recursively)."""
    if os.path.exists(path):
        os.unlink(path)
    conn = sqlite3.connect(path)
    _schema(conn)
    rows = []
    for order, level in enumerate(range(depth - 1, -1, -1)):   # post-order: the deepest first, the root last
        name = chain_name(level)
        parent = chain_name(level - 1) if level else "DefaultModel"
        kids = json.dumps([chain_name(level + 1)]) if level < depth - 1 else ""
        rows.append((f"NPU_0_0_{name}", "NPU_0_0", order, name, "0", parent, kids, None, None, 0, "[]", "", "",
                     "{}", 0, "", "", "NPU", None, 0, 0, 0))
    rows.append(("NPU_0_0_DefaultModel", "NPU_0_0", depth, "DefaultModel", "0", "", json.dumps([chain_name(0)]),
                 None, None, 0, "[]", "", "", "{}", 0, "", "", "NPU", None, 0, 0, 0))
    conn.executemany("INSERT INTO tb_nodes VALUES (" + ",".join("?" * 22) + ")", rows)
    conn.execute("INSERT INTO tb_config VALUES ('1', 'build', 'summary', '{}', 1, 0, ?, '[0]', '[0]')",
                 (json.dumps(_NODE_COLORS),))
    conn.commit()
    conn.close()
    return path
