"""The Monitor view end to end: a real training run recorded by TrainerMon, a real `tensorboard --logdir` process,
a real Chromium. Heatmap drawn, a clicked cell plots its series (two cells side by side), an anomaly jumps to
its cell. Screenshots go to test-artifacts/monitor_dashboard_*.png."""
import os
import time
import urllib.request

import pytest
import torch

from tbprobe.monitor import TrainerMon
from tests.monitor.helpers import Net, train, write_config
from tests.tb_plugin.tb_server import TensorBoardServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATIC = os.path.join(ROOT, "tbprobe", "tb_plugin", "static", "index.js")
ARTIFACTS = os.path.join(ROOT, "test-artifacts")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mon_e2e")
    torch.manual_seed(0)
    model = Net(n=6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    cfg = write_config(tmp, tmp / "logs" / "demo_job", xy_distribution=True, wg_distribution=True,
                       targets={f"layers.{i}": {} for i in range(6)} | {"head": {}}, ops=["max", "mean", "norm"],
                       alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0}}]})
    mon = TrainerMon(cfg)
    mon.set_monitor(model, opt)
    train(model, opt, 40, scale={25: 40.0})  # a spike at step 25
    mon.close()
    return tmp / "logs"


@pytest.fixture(scope="module")
def server(logdir):
    with TensorBoardServer(logdir, extra_args=["--load_fast=false", "--reload_interval=1"]) as tb:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{tb.url}/data/plugin/graph_ascend/api/monitor/runs", timeout=5) as r:
                    if b"demo_job" in r.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"tensorboard did not list the monitor job within 90 s: {tb.log()}")
            time.sleep(0.5)
        yield tb.url


def _ready(frame, timeout=30000):
    frame.wait_for_function("() => window.__tbprobeMonitor && window.__tbprobeMonitor.ready", timeout=timeout)


def _click_cell(frame, row, col):
    pos = frame.evaluate(
        """([r, c]) => { const m = window.__tbprobeMonitor; const rect = m.cellRect(r, c);
        const cv = document.querySelector('[data-testid=monitor-heatmap]').getBoundingClientRect();
        return rect && {x: rect.x - cv.left + rect.w / 2, y: rect.y - cv.top + rect.h / 2}; }""",
        [row, col],
    )
    assert pos, f"no cell {row},{col}"
    frame.locator("[data-testid=monitor-heatmap]").click(position=pos)


def _painted(frame, testid) -> int:
    """Pixels of a canvas that are not fully transparent: proof that something was drawn."""
    return frame.evaluate(
        """(id) => { const c = document.querySelector(`[data-testid=${id}]`);
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""",
        testid,
    )


def test_monitor_dashboard_heatmap_series_and_anomaly_jump(server, browser):
    # (make test builds the bundle first: a bundle without the monitor view is a failure, never a skip)
    assert os.path.exists(STATIC) and b"monitor-heatmap" in open(STATIC, "rb").read(), \
        "the frontend bundle does not contain the monitor view: run `make frontend`"

    os.makedirs(ARTIFACTS, exist_ok=True)
    # The session's one browser (tests/e2e/conftest.py): a second sync Playwright in this process would fail.
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/#graph_ascend", wait_until="domcontentloaded")
        page.wait_for_selector("iframe", timeout=60000)
        frame = None
        deadline = time.monotonic() + 60
        while frame is None and time.monotonic() < deadline:
            for f in page.frames:
                if f != page.main_frame and f.query_selector("[data-testid=view-tab-monitor]"):
                    frame = f
            time.sleep(0.3)
        assert frame is not None, "the GRAPH_ASCEND page has no Monitor tab"
        # (the monitor's files alone: the page opens on the Monitor view; it opened on the Graph tab's "No .vis.db"
        # message, the Monitor button left for the user to find)
        frame.wait_for_selector("[data-testid=monitor-root]", timeout=30000)
        assert frame.locator("[data-testid=view-tab-monitor]").get_attribute("aria-selected") == "true"
        _ready(frame)
        frame.wait_for_function("() => window.__tbprobeMonitor.rows().length > 0", timeout=30000)

        rows = frame.evaluate("() => window.__tbprobeMonitor.rows()")
        assert rows == ["head", "layers.0", "layers.1", "layers.2", "layers.3", "layers.4", "layers.5"]
        assert frame.evaluate("() => window.__tbprobeMonitor.cols()") == 40  # 40 steps fit: one column each
        assert _painted(frame, "monitor-heatmap") > 1000

        # A clicked cell plots its series; a second cell is drawn beside it.
        _click_cell(frame, 2, 10)  # layers.1, step 10
        frame.wait_for_function("() => window.__tbprobeMonitor.series().length === 1", timeout=30000)
        assert frame.evaluate("() => window.__tbprobeMonitor.series()") == ["rank0:layers.1/output_norm"]
        assert _painted(frame, "monitor-chart") > 500
        _click_cell(frame, 4, 10)  # layers.3
        frame.wait_for_function("() => window.__tbprobeMonitor.series().length === 2", timeout=30000)
        assert frame.locator("[data-testid=monitor-series-item]").count() == 2

        # The anomaly list: the spike at step 25 on layers.0's input; clicking it jumps to the cell.
        frame.wait_for_function("() => window.__tbprobeMonitor.anomalies() > 0", timeout=30000)
        item = frame.locator("[data-testid=monitor-anomaly]", has_text="layers.0 / input_norm").first
        assert "25" in item.inner_text()
        item.click()
        frame.wait_for_function(
            "() => { const h = window.__tbprobeMonitor.highlighted(); return h && h.row === 'layers.0' && h.col === 25 "
            "&& window.__tbprobeMonitor.series().includes('rank0:layers.0/input_norm'); }",
            timeout=30000,
        )
        assert frame.locator("[data-testid=monitor-metric]").input_value() == "input"
        page.screenshot(path=os.path.join(ARTIFACTS, "monitor_dashboard_jump.png"), full_page=True)
        # The filter narrows the rows.
        frame.locator("[data-testid=monitor-filter]").fill("layers.1,layers.2")
        frame.wait_for_function("() => window.__tbprobeMonitor.rows().join() === 'layers.1,layers.2'",
                                timeout=30000)
        page.screenshot(path=os.path.join(ARTIFACTS, "monitor_dashboard_filtered.png"), full_page=True)
        assert not errors, errors
    finally:
        context.close()
