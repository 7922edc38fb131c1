"""The GRAPH_ASCEND TensorBoard plugin: routes in graph_ascend_plugin.py, data access in the modules beside it,
the built frontend bundle in static/."""
