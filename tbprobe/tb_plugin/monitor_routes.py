"""Routes of the Monitor view (``/api/monitor/...``), merged into the GRAPH_ASCEND plugin's routes.

Thin WSGI wrappers around :mod:`tbprobe.monitor.dashboard`, which reads TensorBoard's data provider. Stateless and
read-only; errors are ``{"error": ...}`` with a 4xx status like the rest of the API. Documented in docs/monitor.md.
"""
import json
import logging
from typing import Callable, Dict, Optional

from tensorboard import plugin_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tbprobe.monitor import dashboard, warm_start
from tbprobe.monitor.dashboard import QueryError

__all__ = ["get_routes"]

_log = logging.getLogger("tbprobe.tb_plugin")


def _json(body: dict, status: int = 200) -> wrappers.Response:
    data = json.dumps(body, allow_nan=False, separators=(",", ":"))
    return wrappers.Response(data, status=status, content_type="application/json",
                             headers={"Cache-Control": "no-store"})


def _int(args, name: str, default: Optional[int] = None) -> Optional[int]:
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise QueryError(400, f"parameter {name!r} must be an integer, got {raw!r}") from None


def _series_specs(args):
    specs = []
    for raw in args.getlist("s"):
        parts = raw.split("|")
        if len(parts) != 4:
            raise QueryError(400, f"series {raw!r} must be <rank>|<module>|<metric>|<op>")
        rank, module, metric, op = parts
        try:
            specs.append((int(rank), module, metric, op))
        except ValueError:
            raise QueryError(400, f"series {raw!r}: rank must be an integer") from None
    return specs


def _check_recorded(job: dashboard.Job, metric: str, op: str) -> None:
    """A heatmap of a metric or op the job has no series of is a mistyped request, not an empty result."""
    known = job.to_json()["metrics"]
    if op in known.get(metric, ()):
        return
    listed = "; ".join(f"{m} ({', '.join(ops)})" for m, ops in known.items()) or "none"
    raise QueryError(404, f"job {job.name!r} has no {metric!r} series with op {op!r}; its metrics: {listed}")


def get_routes(context: base_plugin.TBContext) -> Dict[str, Callable]:
    """The monitor's routes, keyed like the plugin's own (``/api/monitor/runs`` ...)."""
    provider = context.data_provider
    warm_start.start(provider)  # read the first views' series while TensorBoard loads, before anyone asks

    def route(handler):
        @wrappers.Request.application
        def app(request):
            if request.method != "GET":
                return _json({"error": "only GET is allowed here"}, 405)
            if provider is None:
                return _json({"error": "this TensorBoard has no data provider"}, 404)
            try:
                ctx = plugin_util.context(request.environ)
                eid = plugin_util.experiment_id(request.environ)
                return _json(handler(request.args, ctx, eid))
            except QueryError as exc:
                return _json({"error": exc.message}, exc.status)
            except Exception as exc:  # noqa: BLE001 - one line to the client, the details to the log
                _log.exception("monitor route failed")
                return _json({"error": f"internal error: {type(exc).__name__}"}, 500)

        return app

    def runs(args, ctx, eid):
        jobs = dashboard.list_jobs(provider, ctx, eid)
        return {"jobs": [j.to_json() for j in jobs.values()]}

    def heatmap(args, ctx, eid):
        body = dashboard.heatmap(
            provider, ctx, eid, job=args.get("job"), metric=args.get("metric"), op=args.get("op", "norm"),
            mode=args.get("mode", "step_module"), rank=_int(args, "rank"), module=args.get("module") or None,
            step=_int(args, "step"), filter=args.get("filter"), offset=_int(args, "offset", 0),
            limit=_int(args, "limit", 200), max_cols=_int(args, "max_cols", 400), focus=args.get("focus") or None,
        )
        if not body.get("total_rows"):  # only an empty page can come from a series the job never recorded
            _check_recorded(dashboard.list_jobs(provider, ctx, eid, warm=False)[body["job"]], body["metric"], body["op"])
        return body

    def series(args, ctx, eid):
        return dashboard.series(provider, ctx, eid, job=args.get("job"), specs=_series_specs(args),
                                points=_int(args, "points", 1000))

    def anomalies(args, ctx, eid):
        return dashboard.anomalies(provider, ctx, eid, job=args.get("job"), rank=_int(args, "rank"),
                                   offset=_int(args, "offset", 0), limit=_int(args, "limit", 500))

    return {
        "/api/monitor/runs": route(runs),
        "/api/monitor/heatmap": route(heatmap),
        "/api/monitor/series": route(series),
        "/api/monitor/anomalies": route(anomalies),
    }
