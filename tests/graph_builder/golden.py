"""Field-by-field comparison of a tbprobe .vis.db with a reference fixture database."""
import json
import sqlite3
from pathlib import Path
from typing import Dict, List, Tuple

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe-26.2.0"
INPUTS = FIXTURES / "inputs"
OUTPUTS = FIXTURES / "outputs"

COLUMNS = ("node_order", "node_type", "up_node", "sub_nodes", "precision_index", "overflow_level",
           "micro_step_id", "matched_node_link", "parallel_merge_info", "matched_distributed", "modified",
           "data_source", "step", "rank", "is_distributed")


def open_ro(path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def reference_db(case: str) -> Path:
    return next((OUTPUTS / case).glob("*.vis.db"))


def nodes(path) -> Dict[str, dict]:
    conn = open_ro(path)
    try:
        out = {}
        stacks = {r["id"]: r["stack_info"] for r in conn.execute("SELECT id, stack_info FROM tb_stack")}
        for row in conn.execute("SELECT * FROM tb_nodes"):
            d = dict(row)
            d["stack"] = stacks.get(d["stack_id"])
            out[d["id"]] = d
        return out
    finally:
        conn.close()


def config(path) -> dict:
    conn = open_ro(path)
    try:
        return dict(conn.execute("SELECT * FROM tb_config").fetchone())
    finally:
        conn.close()


def differences(ours_path, ref_path, skip_fields=(), data_fields=True) -> List[Tuple[str, str, object, object]]:
    """(node id, what, ours, reference) for every difference."""
    ours, ref = nodes(ours_path), nodes(ref_path)
    diffs = []
    for nid in sorted(set(ours) | set(ref)):
        if nid not in ours or nid not in ref:
            diffs.append((nid, "presence", nid in ours, nid in ref))
            continue
        a, b = ours[nid], ref[nid]
        for col in COLUMNS + ("stack",):
            if col in skip_fields:
                continue
            if a[col] != b[col]:
                diffs.append((nid, col, a[col], b[col]))
        if not data_fields:
            continue
        for col in ("input_data", "output_data"):
            da, db = json.loads(a[col] or "{}"), json.loads(b[col] or "{}")
            if list(da) != list(db):
                diffs.append((nid, col + " keys", list(da), list(db)))
                continue
            for key in da:
                fa, fb = da[key], db[key]
                fa = {k: v for k, v in fa.items() if k not in skip_fields}
                fb = {k: v for k, v in fb.items() if k not in skip_fields}
                if fa != fb:
                    diffs.append((nid, f"{col}[{key}]", fa, fb))
    return diffs
