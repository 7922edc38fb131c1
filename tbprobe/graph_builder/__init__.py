"""The graph builder: dumps -> hierarchical graph -> compare -> .vis.db (and the compare table)."""
from tbprobe._lazy import lazy_exports

__all__ = ["build_rank_rows", "run_graph", "compare_nodes", "GraphResult"]

# imported on first use: `python -m tbprobe.graph_builder graph` (a build) then never loads the compare modules
__getattr__ = lazy_exports(__name__, {
    "build_rank_rows": ("tbprobe.graph_builder.api", "build_rank_rows"),
    "compare_nodes": ("tbprobe.graph_builder.api", "compare_nodes"),
    "run_graph": ("tbprobe.graph_builder.run", "run_graph"),
    "GraphResult": ("tbprobe.graph_builder.run", "GraphResult"),
})
