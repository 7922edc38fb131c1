"""Warm the Monitor dashboard's series cache when TensorBoard starts, before anyone opens the view.

The warm-up of :mod:`tbprobe.monitor.warmup` otherwise starts with the view's first ``runs`` request, and the
browser asks for the first heatmap right after it: that page is then read by the request itself. Started at
launch (``start(provider)`` from the plugin's route setup), the warm-up has usually read the first views by the
time a user opens them. TensorBoard loads the log directory in the background, for minutes on a large one, so this
polls the provider's listing every ``POLL_S`` seconds (a poll walks the stored points: about a second for 2 x 1000
series of 1000 points) and starts the warm-up once the monitor jobs stop growing between two polls (series read
half-loaded would be read again), or after ``patience`` polls with jobs that keep growing (a live run). Then it
stops polling, as it does after ``max_polls`` polls (10 minutes) without any monitor job: from then on the view's
own ``runs`` request starts the warm-up. Its last listing also answers the view's first ``runs`` while fresh.
"""
import logging
import threading
from typing import Optional

from tbprobe.monitor import dashboard

__all__ = ["start"]

_log = logging.getLogger("tbprobe.monitor")
POLL_S = 30.0  # between listings while TensorBoard loads


def _shape(jobs) -> dict:
    return {(j.name, r, t): getattr(ts, "max_step", None)
            for j in jobs.values() for r, tags in j.tags.items() for t, ts in tags.items()}


def start(provider, eid: str = "", poll_s: Optional[float] = None, patience: int = 10,
          max_polls: int = 20) -> Optional[threading.Thread]:
    """Start the launch-time warm-up in a daemon thread (``None`` without a provider); returns the thread."""
    if provider is None:
        return None
    poll_s = POLL_S if poll_s is None else poll_s
    from tensorboard.context import RequestContext

    stop = threading.Event()

    def run():
        ctx = RequestContext()
        previous, growing = None, 0
        for _ in range(max_polls):
            if stop.wait(poll_s):
                return
            try:
                jobs = dashboard.list_jobs(provider, ctx, eid, warm=False)
            except Exception:  # noqa: BLE001 - TensorBoard still starting; the view's own requests warm later
                _log.debug("monitor launch warm-up: listing failed", exc_info=True)
                continue
            if not jobs:
                continue
            shape = _shape(jobs)
            growing += 1
            if shape == previous or growing >= patience:
                dashboard.list_jobs(provider, ctx, eid)  # the same listing, now scheduling the warm-up
                return
            previous = shape

    thread = threading.Thread(target=run, name="tbprobe-monitor-launch", daemon=True)
    thread.stop = stop  # type: ignore[attr-defined]  # tests end it early
    thread.start()
    return thread
