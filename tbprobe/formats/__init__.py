"""Readers and writers of the files users already have: dump directories (dump.json, construct.json, stack.json),
the .vis.db graph database (whole and live), legacy .vis JSON and the .vis.config / .legend.json side files.
Shared by the collector, the graph builder and the plugin; none of them reaches into another's internals.

The formats and this package's API are described in docs/formats.md; deliberate differences from msprobe in
docs/compatibility.md (## Formats). One module per format: dump_dir, dump_json (+ dump_writer), construct_json,
stack_json, vis_db (+ vis_schema, vis_db_reader, live_vis_db), vis_json, vis_config; `tbprobe inspect` is cli.py.
"""
