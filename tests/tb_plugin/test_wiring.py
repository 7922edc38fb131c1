"""The entry point TensorBoard uses, the monitor routes merged when present, and a broken monitor tolerated."""
from importlib import metadata as importlib_metadata

from tensorboard.plugins import base_plugin

from tbprobe.tb_plugin import graph_ascend_plugin, metadata
from tbprobe.tb_plugin.graph_ascend_plugin import GraphAscendLoader, GraphAscendPlugin


def test_entry_point_loads_the_plugin(tmp_path):
    eps = importlib_metadata.entry_points(group="tensorboard_plugins")
    ep = [e for e in eps if e.name == "graph_ascend"][0]
    assert ep.value == "tbprobe.tb_plugin.graph_ascend_plugin:GraphAscendLoader"
    plugin = ep.load()().load(base_plugin.TBContext(logdir=str(tmp_path)))
    assert isinstance(plugin, GraphAscendPlugin) and plugin.plugin_name == metadata.PLUGIN_NAME
    fm = plugin.frontend_metadata()
    assert fm.es_module_path == "/index.js" and fm.tab_name == "GRAPH_ASCEND"
    assert isinstance(GraphAscendLoader().load(base_plugin.TBContext(logdir=str(tmp_path))), GraphAscendPlugin)


def test_monitor_routes_are_merged_and_a_broken_monitor_is_tolerated(tmp_path, monkeypatch):
    plugin = GraphAscendPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    apps = plugin.get_plugin_apps()
    assert "/api/children" in apps and "/static/*" in apps
    try:
        from tbprobe.tb_plugin import monitor_routes
    except ImportError:
        return
    assert all(k in apps for k in monitor_routes.get_routes(base_plugin.TBContext(logdir=str(tmp_path))))

    def broken(context):
        raise RuntimeError("monitor exploded")
    monkeypatch.setattr(monitor_routes, "get_routes", broken)
    apps = plugin.get_plugin_apps()
    assert "/api/children" in apps and not [k for k in apps if k.startswith("/api/monitor/")]
    monkeypatch.setattr(monitor_routes, "get_routes", lambda c: {"/api/children": None, "/api/monitor/x": None})
    apps = plugin.get_plugin_apps()
    assert apps["/api/children"] is not None  # a monitor cannot replace a graph route
    assert graph_ascend_plugin.GraphAscendPlugin is GraphAscendPlugin
