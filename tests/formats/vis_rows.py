"""A plausible tb_nodes row for tests that write .vis.db files by hand (tests/formats, the plugin's live-file test)."""
import json

__all__ = ["node_row"]


def node_row(step, rank, side, i, n, parent="DefaultModel"):
    """A plausible tb_nodes row; node i == n-1 is the root."""
    gid = f"{side}_{step}_{rank}"
    name = "DefaultModel" if i == n - 1 else f"Module.layers.{i}.Linear.forward.0"
    up = "" if i == n - 1 else parent
    subs = json.dumps([f"Module.layers.{j}.Linear.forward.0" for j in range(n - 1)]) if i == n - 1 else ""
    return (f"{gid}_{name}", gid, i, name, "0", up, subs, None, None, 0, "[]", f"{gid}_0", "", "{}", 0,
            "{}", "{}", side, None, step, rank, 0)
