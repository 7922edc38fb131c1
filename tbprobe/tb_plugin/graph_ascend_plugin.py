"""Routes of the GRAPH_ASCEND tab (API in docs/http_api.md).

Each route only parses and checks its request and calls the data layer (graph_data.py, edits.py); every error
becomes ``{"error": "..."}`` with a 4xx status, never a traceback. Route paths are relative to the plugin's
prefix, so the plugin works under ``--path_prefix``.
"""
import gzip
import json
import logging
import math
import mimetypes
import os
import time
from typing import Callable, Dict

from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tbprobe.tb_plugin import metadata
from tbprobe.tb_plugin import request_params as rp
from tbprobe.tb_plugin.api_error import ApiError
from tbprobe.tb_plugin.edits import Edits
from tbprobe.tb_plugin.graph_data import PRECISION_CLASSES, GraphData
from tbprobe.tb_plugin.graph_index import OVERFLOW_LEVELS
from tbprobe.tb_plugin.security import HostCheck, read_json_post, resolve_inside

__all__ = ["GraphAscendPlugin", "GraphAscendLoader"]

logger = logging.getLogger(__name__)

_STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_PLACEHOLDER_JS = b"export async function render() { document.body.textContent = 'tbprobe GRAPH_ASCEND'; }\n"
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".json": "application/json",
          ".map": "application/json", ".wasm": "application/wasm", ".svg": "image/svg+xml", ".png": "image/png",
          ".woff2": "font/woff2", ".woff": "font/woff", ".ttf": "font/ttf", ".txt": "text/plain"}
_OVERFLOWS = [o for o in OVERFLOW_LEVELS if o]


def _json_default(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def _clean(value):
    """JSON has no NaN/Infinity: such floats become null (deep copy only when one is found)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _json(body, status: int = 200) -> wrappers.Response:
    try:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False, default=_json_default)
    except ValueError:
        text = json.dumps(_clean(body), ensure_ascii=False, allow_nan=False, default=_json_default)
    resp = wrappers.Response(text.encode("utf-8"), status=status, content_type="application/json; charset=utf-8")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Cache-Control"] = "no-store"
    return resp


_GZIP_MIN_BYTES = 32 * 1024


def _maybe_gzip(request, resp: wrappers.Response) -> None:
    """Compress big JSON answers (a 20k-children expand shrinks about tenfold) when the browser accepts gzip."""
    if resp.direct_passthrough or "gzip" not in (request.headers.get("Accept-Encoding") or ""):
        return
    if resp.mimetype not in ("application/json", "text/csv") or resp.headers.get("Content-Encoding"):
        return
    body = resp.get_data()
    if len(body) < _GZIP_MIN_BYTES:
        return
    resp.set_data(gzip.compress(body, compresslevel=1))
    resp.headers["Content-Encoding"] = "gzip"
    resp.headers["Vary"] = "Accept-Encoding"


def _finish(request, resp: wrappers.Response, start: float) -> wrappers.Response:
    """What every API answer gets last (docs/http_api.md): gzip when it is big and the browser accepts it, and
    the server's own time, readable by the browser's devtools and by bench/plugin_bench.py."""
    _maybe_gzip(request, resp)
    resp.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - start) * 1000:.2f}"
    return resp


def _route(handler: Callable) -> Callable:
    """Turn a handler(request) -> body into a WSGI app with the error policy of the API."""

    @wrappers.Request.application
    def app(request):
        start = time.perf_counter()
        try:
            result = handler(request)
            resp = result if isinstance(result, wrappers.Response) else _json(result)
        except ApiError as exc:
            resp = _json({"error": exc.message}, exc.status)
        except Exception:  # noqa: BLE001 - the user sees one line; the log keeps the traceback
            logger.exception("graph_ascend: %s failed", request.path)
            resp = _json({"error": "internal error while answering this request (see the TensorBoard log)"}, 500)
        return _finish(request, resp, start)

    return app


def _served(wsgi_app: Callable) -> Callable:
    """A WSGI app merged from elsewhere (the monitor's routes, which keep their own error policy), answered
    through the same last step as the plugin's own routes: its response, buffered, gets gzip and Server-Timing
    (the monitor's answers had neither: a 33 kB anomaly list went out plain)."""

    @wrappers.Request.application
    def app(request):
        start = time.perf_counter()
        return _finish(request, wrappers.Response.from_app(wsgi_app, request.environ, buffered=True), start)

    return app


def _graph_args(args, body: bool = False) -> tuple:
    return (rp.text(args, "run"), rp.text(args, "file"), rp.integer(args, "step", 0, body=body),
            rp.integer(args, "rank", 0, body=body))


def _paging(args, default_limit: int) -> tuple:
    return rp.integer(args, "offset", 0, 0), rp.integer(args, "limit", default_limit, 1, rp.MAX_LIMIT)


class GraphAscendPlugin(base_plugin.TBPlugin):
    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._logdir = context.logdir or ""
        self._context = context
        self.data = GraphData(self._logdir)
        self.edits = Edits(self.data)
        self._hosts = HostCheck(getattr(context, "flags", None))  # (the names writes answer to: --host, the env)
        if self._logdir and os.environ.get("TBPROBE_PLUGIN_WARMUP", "1") != "0":
            self.data.warm_up()

    def get_plugin_apps(self) -> Dict[str, Callable]:
        routes = {
            "/index.js": self._index_js,
            "/static/*": self._static,
            "/api/runs": _route(lambda r: self.data.runs()),
            "/api/meta": _route(lambda r: self.data.meta(rp.text(r.args, "run"), rp.text(r.args, "file"))),
            "/api/root": _route(self._root),
            "/api/children": _route(self._children),
            "/api/node": _route(self._node),
            "/api/path_children": _route(self._path_children),
            "/api/depth_children": _route(self._depth_children),
            "/api/search": _route(self._search),
            "/api/filter": _route(self._filter),
            "/api/compare_table": _route(self._compare_table),
            "/api/findings": _route(lambda r: self.data.findings(*_graph_args(r.args))),
            "/api/overflow": _route(lambda r: self.data.overflow(*_graph_args(r.args), rp.side(r.args, "NPU"))),
            "/api/matches": _route(lambda r: self.data.matches(*_graph_args(r.args))),
            "/api/match": _route(self._match),
            "/api/unmatch": _route(self._unmatch),
            "/api/legend": _route(self._legend),
            "/api/apply": _route(self._apply),
        }
        routes.update(self._monitor_routes())
        return routes

    def _monitor_routes(self) -> Dict[str, Callable]:
        try:
            from tbprobe.tb_plugin import monitor_routes  # owned by the monitor part; optional
        except ImportError:
            return {}
        try:
            extra = monitor_routes.get_routes(self._context)
        except Exception:  # noqa: BLE001 - a broken monitor must not take the graph views down
            logger.exception("graph_ascend: monitor routes failed to load")
            return {}
        return {k: _served(v) for k, v in extra.items() if k.startswith("/api/monitor/")}

    def is_active(self) -> bool:
        # Always listed: files may appear after start-up, and the tab itself explains an empty log directory.
        return True

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=metadata.TAB_NAME,
                                            disable_reload=True)

    # --- static files ----------------------------------------------------------------------------------------
    @wrappers.Request.application
    def _index_js(self, request):
        path = os.path.join(_STATIC, "index.js")
        body = _PLACEHOLDER_JS
        if os.path.isfile(path):
            with open(path, "rb") as f:
                body = f.read()
        resp = wrappers.Response(body, content_type="text/javascript; charset=utf-8")
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    @wrappers.Request.application
    def _static(self, request):
        marker = f"/{metadata.PLUGIN_NAME}/static/"
        path_in = request.path
        if marker not in path_in:
            marker = "/static/"
        name = path_in.split(marker, 1)[1] if marker in path_in else ""
        try:
            if not name:
                raise ApiError(404, "no such static file")
            path = resolve_inside(_STATIC, name, folder="the plugin's static folder")
        except ApiError as exc:
            return _json({"error": exc.message}, exc.status)
        if not os.path.isfile(path):
            return _json({"error": f"no such static file: {name}"}, 404)
        ext = os.path.splitext(path)[1].lower()
        ctype = _TYPES.get(ext) or mimetypes.guess_type(path)[0] or "application/octet-stream"
        with open(path, "rb") as f:
            body = f.read()
        resp = wrappers.Response(body, content_type=ctype)
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    # --- graph reads -----------------------------------------------------------------------------------------
    def _root(self, r):
        return self.data.root(*_graph_args(r.args), rp.side(r.args))

    def _children(self, r):
        offset, limit = _paging(r.args, 5000)
        return self.data.children(*_graph_args(r.args), rp.side(r.args), rp.text(r.args, "node"),
                                  rp.integer(r.args, "micro_step", -1, -1), offset, limit,
                                  rp.flag(r.args, "compact"))

    def _path_children(self, r):
        return self.data.path_children(*_graph_args(r.args), rp.side(r.args), rp.text(r.args, "node"),
                                       rp.integer(r.args, "micro_step", -1, -1),
                                       rp.integer(r.args, "limit", 2000, 1, rp.MAX_LIMIT))

    def _depth_children(self, r):
        return self.data.depth_children(*_graph_args(r.args), rp.side(r.args), rp.integer(r.args, "depth", 1, 1, 64),
                                        rp.integer(r.args, "micro_step", -1, -1),
                                        rp.integer(r.args, "limit", 2000, 1, rp.MAX_LIMIT),
                                        rp.integer(r.args, "max_nodes", 3000, 1, 100_000))

    def _node(self, r):
        return self.data.node(*_graph_args(r.args), rp.side(r.args), rp.text(r.args, "node"))

    def _search(self, r):
        offset, limit = _paging(r.args, 100)
        return self.data.search(*_graph_args(r.args), rp.side(r.args), rp.text(r.args, "q", "", 1000),
                                rp.flag(r.args, "regex"), offset, limit)

    def _filter(self, r):
        offset, limit = _paging(r.args, 100)
        return self.data.filter(*_graph_args(r.args), rp.side(r.args, "NPU"),
                                rp.choices(r.args, "precision", PRECISION_CLASSES),
                                rp.choices(r.args, "overflow", _OVERFLOWS), rp.text(r.args, "sort", "order", 100),
                                rp.flag(r.args, "desc"), offset, limit, rp.text(r.args, "metric", "", 100))

    def _compare_table(self, r):
        fmt = rp.text(r.args, "format", "json", 10)
        if fmt not in ("json", "csv"):
            raise ApiError(400, "parameter format must be json or csv")
        offset, limit = _paging(r.args, 200)
        if fmt == "csv":
            offset, limit = 0, 0  # the whole (filtered, sorted) table
        args = (*_graph_args(r.args), rp.choices(r.args, "precision", PRECISION_CLASSES),
                rp.text(r.args, "q", "", 1000), rp.text(r.args, "sort", "order", 200), rp.flag(r.args, "desc"),
                offset, limit)
        if fmt == "json":
            return self.data.compare_table(*args)
        text = self.data.compare_csv(*args)
        name = os.path.basename(args[1]).replace('"', "") + f"_{args[2]}_{args[3]}.compare.csv"
        resp = wrappers.Response(text.encode("utf-8-sig"), content_type="text/csv; charset=utf-8")
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    # --- writes ----------------------------------------------------------------------------------------------
    def _post_body(self, r) -> dict:
        if r.method != "POST":
            raise ApiError(405, "use POST")
        return read_json_post(r, hosts=self._hosts)

    def _match(self, r):
        body = self._post_body(r)
        return self.edits.match(*_graph_args(body, True), rp.text(body, "debug"), rp.text(body, "bench"),
                                rp.flag(body, "descendants", True))

    def _unmatch(self, r):
        body = self._post_body(r)
        return self.edits.unmatch(*_graph_args(body, True), rp.text(body, "debug"),
                                  rp.flag(body, "descendants", True))

    def _legend(self, r):
        if r.method == "GET":
            meta = self.data.meta(rp.text(r.args, "run"), rp.text(r.args, "file"))
            return {"node_colors": meta["node_colors"], "edited": bool(meta.get("legend_edited"))}
        body = self._post_body(r)
        return self.edits.legend(rp.text(body, "run"), rp.text(body, "file"), body.get("node_colors"))

    def _apply(self, r):
        body = self._post_body(r)
        return self.edits.apply(rp.text(body, "run"), rp.text(body, "file"))


class GraphAscendLoader(base_plugin.TBLoader):
    def load(self, context: base_plugin.TBContext) -> GraphAscendPlugin:
        return GraphAscendPlugin(context)
