"""`/api/children?compact=1`'s column form read back into the object form, as the frontend's decoder does: for the
tests that check both forms say the same."""
__all__ = ["DEFAULTS", "LEVELS", "expand_compact"]

DEFAULTS = {"precision": None, "subtree_precision": None, "overflow": None, "subtree_overflow": None,
            "matched": True, "micro_step": 0}
LEVELS = (None, "medium", "high", "critical")


def expand_compact(block: dict) -> list:
    """The object form rebuilt from the columns (what the frontend's decoder does)."""
    cols = block["compact"]
    out = []
    manual = set(cols.get("manual", []))
    for i, name in enumerate(cols["name"]):
        item = {"name": name, "type": cols["type"][i], "n_children": cols["n_children"][i], "order": cols["order"][i]}
        for key, default in DEFAULTS.items():
            item[key] = cols[key][i] if key in cols else default
        for key in ("overflow", "subtree_overflow"):
            if key in cols:
                item[key] = LEVELS[item[key]]
        if "matched" in cols:
            item["matched"] = bool(item["matched"])
        if i in manual:
            item["manual"] = True
        out.append(item)
    return out
