"""Readers and writers of the files users already have: dump directories (dump.json, construct.json, stack.json),
the .vis.db graph database, legacy .vis JSON and .vis.config side files. Shared by the collector, the graph
builder and the plugin; none of them reaches into another's internals."""
