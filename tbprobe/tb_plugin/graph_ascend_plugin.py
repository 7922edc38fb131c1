"""Routes of the GRAPH_ASCEND tab. Minimal for now: it proves the entry-point wiring end to end."""
import os

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tbprobe.tb_plugin import metadata

_STATIC = os.path.join(os.path.dirname(__file__), "static")


class GraphAscendPlugin(base_plugin.TBPlugin):
    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._logdir = context.logdir

    def get_plugin_apps(self):
        return {"/index.js": self._serve_index_js}

    def is_active(self) -> bool:
        return True

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=metadata.TAB_NAME)

    @wrappers.Request.application
    def _serve_index_js(self, request):
        path = os.path.join(_STATIC, "index.js")
        if os.path.exists(path):
            with open(path, "rb") as f:
                body = f.read()
        else:
            body = b"export async function render() { document.body.textContent = 'tbprobe GRAPH_ASCEND'; }\n"
        return wrappers.Response(body, content_type="application/javascript")


class GraphAscendLoader(base_plugin.TBLoader):
    def load(self, context: base_plugin.TBContext) -> GraphAscendPlugin:
        return GraphAscendPlugin(context)
