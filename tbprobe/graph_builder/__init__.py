"""The graph builder: dumps -> hierarchical graph -> compare -> .vis.db."""
