"""The tab against a live graph (the collector's `.vis.db` under `<dump_path>_tb/`, gaining steps and dropping old
ones while the page is open) and against a damaged default file, with a tensorboard process of their own."""
import glob
import os
import random
import urllib.parse

import pytest

from tests.tb_plugin.synth_db import make_compare_db
from tests.tb_plugin.tb_server import TensorBoardServer

pytestmark = pytest.mark.e2e

torch = pytest.importorskip("torch")

DAMAGED = "a_damaged/compare_damaged.vis.db"
GOOD = "b_good/compare_good.vis.db"
LIVE_RUN = "job_tb"
STEPS = 9


def _collect(dump: str) -> list:
    """STEPS collected steps of a small MLP (the dump only, no live graph): the rank folder of each, in order."""
    from tbprobe import PrecisionDebugger

    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    dbg = PrecisionDebugger(dump_path=dump, task="statistics", level="L1", step=list(range(STEPS)),
                            live_graph=False)
    for _ in range(STEPS):
        dbg.start()
        (fc2(torch.relu(fc1(torch.randn(2, 4)))) + 1).sum().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    dirs = []
    for step in range(STEPS):
        found = [d for d in glob.glob(os.path.join(dump, f"step{step}", "*")) if os.path.isdir(d)]
        assert len(found) == 1, found
        dirs.append(found[0])
    return dirs


@pytest.fixture(scope="module")
def live_setup(tmp_path_factory):
    """A log directory with a damaged compare file listed first, a good one, and the live graph's folder; the
    collector's LiveGraph (what a training run updates after each step) adds the steps as the tests go."""
    from tbprobe.collector.live_graph import LiveGraph

    root = tmp_path_factory.mktemp("live_logs")
    os.makedirs(root / "a_damaged")
    damaged = make_compare_db(str(root / DAMAGED), n_nodes=3000, big_children=100, seed=1)
    size = os.path.getsize(damaged)
    with open(damaged, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(random.Random(0).randbytes(65536))
    os.makedirs(root / "b_good")
    make_compare_db(str(root / GOOD), n_nodes=300, big_children=40)
    work = tmp_path_factory.mktemp("live_job")
    dirs = _collect(str(work / "dump"))
    live = LiveGraph(str(root / "job"))         # (its folder: <dump_path>_tb = job_tb, inside the log directory)
    live.update(dirs[0], 0)
    live.update(dirs[1], 1)
    with TensorBoardServer(root) as tb:
        yield tb, live, dirs
    live.close()


def _page(browser, tb, state: str = ""):
    from tests.e2e.conftest import Plugin

    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = context.new_page()
    bad = []
    page.on("response", lambda r: bad.append(f"{r.status} {r.url}") if "/api/" in r.url and r.status >= 400
            else None)
    return context, Plugin(page, tb).open(state), bad


def _steps(p) -> dict:
    return p.testid("step-select").evaluate("s => ({value: s.value, options: [...s.options].map(o => o.value)})")


def test_a_live_graph_follows_the_collector_without_a_reload(browser, live_setup):
    tb, live, dirs = live_setup
    file = f"build_{os.path.basename(dirs[0])}.vis.db"
    context, p, bad = _page(browser, tb, urllib.parse.quote(urllib.parse.urlencode(dict(run=LIVE_RUN, file=file))))
    try:
        # a live file opens on its newest step; nothing was asked for before the file's steps and sides were known
        assert _steps(p) == {"value": "1", "options": ["0", "1"]}
        assert bad == []
        p.frame.evaluate("() => { window.__sameDocument = true; }")
        live.update(dirs[2], 2)
        p.frame.wait_for_function("() => [...document.querySelector('[data-testid=step-select]').options]"
                                  ".some(o => o.value === '2')", timeout=60000)
        assert _steps(p) == {"value": "1", "options": ["0", "1", "2"]}   # (the view stays where the user is)
        assert p.testid("notice").is_hidden()
        p.testid("step-select").select_option("0")
        p.wait_ready()
        assert "DefaultModel" in p.visible("NPU")
        for step in range(3, 8):       # steps 0..7: the live graph keeps the last 8, all of them
            live.update(dirs[step], step)
        p.frame.wait_for_function("() => [...document.querySelector('[data-testid=step-select]').options]"
                                  ".some(o => o.value === '7')", timeout=60000)
        assert _steps(p) == {"value": "0", "options": [str(s) for s in range(8)]}
        live.update(dirs[8], 8)        # step 0, the one shown, goes
        p.frame.wait_for_function("() => document.querySelector('[data-testid=step-select]').value === '8'",
                                  timeout=60000)
        p.wait_ready()
        assert _steps(p) == {"value": "8", "options": [str(s) for s in range(1, 9)]}
        notice = p.testid("notice-text").inner_text()
        assert p.testid("notice").is_visible() and "Step 0" in notice and "step 8" in notice, notice
        assert "DefaultModel" in p.visible("NPU") and p.testid("error-banner").is_hidden()
        assert p.frame.evaluate("() => window.__sameDocument") is True   # (no reload)
        p.shot("live_step_dropped_en")
        p.choose_file("b_good", "compare_good.vis.db")   # (the notice was about the live file: it goes with it)
        assert p.testid("notice").is_hidden()
    finally:
        context.close()


def test_the_default_file_skips_a_damaged_one_and_the_page_reads_well(browser, live_setup):
    tb = live_setup[0]
    context, p, _ = _page(browser, tb)
    try:
        shown = p.testid("file-select").evaluate("s => s.options[s.selectedIndex].textContent")
        assert shown == GOOD
        notice = p.testid("notice-text").inner_text()
        assert DAMAGED in notice and "malformed" in notice and GOOD in notice, notice
        assert p.testid("error-banner").is_hidden()
        # the pane's title is above the root box, not drawn over it (a graph taller than the pane, fitted)
        p.testid("expand-depth").select_option("6")
        p.wait_ready()
        p.testid("fit-button").click()
        p.wait_ready()
        root = p.frame.evaluate("() => window.__tbprobe.nodeRect('NPU', 'DefaultModel')")
        title = p.frame.evaluate("() => document.querySelector('[data-testid=graph-pane-NPU] .ga-pane-title')"
                                 ".getBoundingClientRect().bottom")
        assert root is not None and root["y"] >= title, (root, title)
        # filter results: the name readable, the metrics under it
        p.testid("precision-filter").get_by_label("pass").check()
        p.frame.wait_for_function("() => document.querySelectorAll('[data-testid=filter-result]').length > 5")
        widths = p.frame.evaluate("""() => [...document.querySelectorAll('[data-testid=filter-result]')].map(li => {
            const n = li.querySelector('.ga-item-name'), m = li.querySelector('.ga-metrics');
            return {name: n.clientWidth, need: n.scrollWidth, row: li.clientWidth, metrics: !!m,
                    below: m ? m.getBoundingClientRect().top >= n.getBoundingClientRect().bottom - 1 : null}; })""")
        assert all(w["metrics"] and w["below"] for w in widths), widths
        assert all(w["name"] >= min(w["need"], w["row"] * 0.6) for w in widths), widths
        p.shot("filter_names_en")
        # a bad regular expression's banner goes once the box is emptied
        p.testid("search-regex").check()
        p.testid("search-input").fill("(")
        p.testid("error-banner").wait_for(state="visible")
        p.testid("search-input").fill("")
        p.testid("error-banner").wait_for(state="hidden")
    finally:
        context.close()
