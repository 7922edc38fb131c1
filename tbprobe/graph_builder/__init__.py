"""The graph builder: dumps -> hierarchical graph -> compare -> .vis.db (and the compare table)."""
from tbprobe.graph_builder.api import build_rank_rows, compare_nodes
from tbprobe.graph_builder.run import GraphResult, run_graph

__all__ = ["build_rank_rows", "run_graph", "compare_nodes", "GraphResult"]
