"""The plugin's name and version, owned in one place (as TensorBoard's own plugins do)."""
PLUGIN_NAME = "graph_ascend"
TAB_NAME = "GRAPH_ASCEND"
PLUGIN_VERSION = "0.1.0"
