"""End-to-end fixtures: one real ``tensorboard`` process serving an msprobe-built, a tbprobe-built and a synthetic
database and one built from a real collector run, and Debian's Chromium driven by Playwright. Screenshots go to
test-artifacts/."""
import os
import shutil

import pytest

from tests.tb_plugin.conftest import FIXTURES, build_tbprobe_db
from tests.tb_plugin.dump_cases import collected_graph
from tests.tb_plugin.synth_db import XSS_NAME, make_compare_db
from tests.tb_plugin.tb_server import TensorBoardServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "..", "test-artifacts")
MSPROBE_RUN, TBPROBE_RUN, XSS_RUN, COLLECTED_RUN = "msprobe_built", "tbprobe_built", "hostile", "collected"
# a tbprobe-built compare whose first divergence is drawn as passing (its weight differs: precision 0, output 200 % off)
DIVERGENT_RUN = "divergent"
# two steps x two ranks, only step 1 rank 1 diverging: the other graphs have no first divergence of their own
MULTIRANK_RUN = "multirank"

__all__ = ["XSS_NAME", "Plugin"]


@pytest.fixture(scope="session")
def e2e_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e_logs")
    os.makedirs(root / MSPROBE_RUN)
    name = [n for n in os.listdir(os.path.join(FIXTURES, "cmp_stat")) if n.endswith(".vis.db")][0]
    shutil.copy(os.path.join(FIXTURES, "cmp_stat", name), root / MSPROBE_RUN / name)
    build_tbprobe_db(root / TBPROBE_RUN)
    os.makedirs(root / XSS_RUN)
    make_compare_db(str(root / XSS_RUN / "compare_hostile.vis.db"), n_nodes=300, big_children=40,
                    extra_names=(XSS_NAME,), with_data=True)
    # a real collector run (its data flow), built by tbprobe graph; only the database goes into the log directory
    work = tmp_path_factory.mktemp("collected_run")
    name = collected_graph(work)
    os.makedirs(root / COLLECTED_RUN)
    shutil.copy(work / name, root / COLLECTED_RUN / name)
    from tbprobe.graph_builder import run_graph
    from tests.tb_plugin.dump_cases import weighted_rank
    dumps = tmp_path_factory.mktemp("divergent_dumps")
    weighted_rank(dumps / "d", 3.0)
    weighted_rank(dumps / "b", 1.0)
    run_graph(str(dumps / "d"), str(dumps / "b"), str(root / DIVERGENT_RUN), parallel=False, progress=False)
    ranks = tmp_path_factory.mktemp("multirank_dumps")
    for side, w in (("d", 3.0), ("b", 1.0)):
        for step in (0, 1):
            for rank in (0, 1):
                weighted_rank(ranks / side / f"step{step}" / f"rank{rank}", w if (step, rank) == (1, 1) else 1.0)
    run_graph(str(ranks / "d"), str(ranks / "b"), str(root / MULTIRANK_RUN), parallel=False, progress=False)
    return root


@pytest.fixture(scope="session")
def tensorboard(e2e_logdir, tmp_path_factory):
    os.environ["TBPROBE_PLUGIN_CACHE"] = str(tmp_path_factory.mktemp("e2e_index_cache"))
    with TensorBoardServer(e2e_logdir) as tb:
        yield tb


@pytest.fixture(scope="session")
def browser():
    """The one Chromium of the whole e2e session. Playwright's sync API allows one running instance per process:
    every e2e module takes this fixture instead of starting its own, so no test depends on the order of modules."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian Chromium missing: run `make system` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def db_name(e2e_logdir, run: str) -> str:
    return [n for n in os.listdir(e2e_logdir / run) if n.endswith(".vis.db")][0]


class Plugin:
    """The GRAPH_ASCEND tab of one browser page: its iframe, the test hooks, clicks at node positions."""

    def __init__(self, page, tb):
        self.page = page
        self.tb = tb
        self.dialogs = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.frame = None

    def open(self, ga_state: str = "", lang: str = "en") -> "Plugin":
        url = self.tb.url + "/#graph_ascend"
        if ga_state:
            url += "&ga=" + ga_state
        self.page.goto(url)
        return self.attach()

    def attach(self) -> "Plugin":
        for _ in range(300):
            frames = [f for f in self.page.frames if "plugin_entry" in f.url and "graph_ascend" in f.url]
            if frames:
                self.frame = frames[0]
                break
            self.page.wait_for_timeout(100)
        assert self.frame is not None, "the GRAPH_ASCEND iframe never appeared"
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60000) -> None:
        self.frame.wait_for_function("() => window.__tbprobe && window.__tbprobe.ready", timeout=timeout)

    def hook(self, expr: str):
        return self.frame.evaluate(f"() => window.__tbprobe.{expr}")

    def visible(self, side: str = "NPU"):
        return self.hook(f"visibleNodes({side!r})")

    def expanded(self, side: str = "NPU"):
        return self.hook(f"expanded({side!r})")

    def selected(self):
        return self.hook("selected()")

    def testid(self, name: str):
        return self.frame.locator(f"[data-testid={name!r}]")

    def _point(self, side: str, name: str):
        rect = self.frame.evaluate("([s, n]) => window.__tbprobe.nodeRect(s, n)", [side, name])
        assert rect is not None, f"{name} is not drawn on the {side} pane"
        box = self.page.locator("iframe").first.bounding_box()
        # click near the top-left of the box: a module's own title strip, not one of its drawn children
        return box["x"] + rect["x"] + min(20, rect["w"] / 2), box["y"] + rect["y"] + min(8, rect["h"] / 2)

    def click_node(self, side: str, name: str) -> None:
        """Click a node; retried when the layout was still settling (positions move after an expand)."""
        for _ in range(5):
            x, y = self._point(side, name)
            self.page.mouse.click(x, y)
            self.wait_ready()
            if self.selected() == name:
                return
            self.page.wait_for_timeout(300)
        raise AssertionError(f"clicking {name} on the {side} pane did not select it (selected: {self.selected()})")

    def dblclick_node(self, side: str, name: str) -> None:
        x, y = self._point(side, name)
        self.page.mouse.dblclick(x, y)
        self.wait_ready()

    def choose_file(self, run: str, file: str) -> None:
        select = self.testid("file-select")
        label = f"{run}/{file}"
        value = select.evaluate("(s, label) => [...s.options].find(o => o.textContent === label).value", label)
        select.select_option(value)
        self.frame.wait_for_function("(f) => (window.top.location.hash || '').includes(encodeURIComponent(f))", arg=file)
        self.wait_ready()

    def shot(self, name: str) -> None:
        os.makedirs(ARTIFACTS, exist_ok=True)
        self.page.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"))


@pytest.fixture
def plugin(browser, tensorboard):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = context.new_page()
    yield Plugin(page, tensorboard)
    context.close()
