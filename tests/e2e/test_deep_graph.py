"""A graph 20,000 modules deep, nested in each other (a generated or hostile file), with a tensorboard process of
its own: a search for the deepest node, then a click on the result, never selected it. The page opened the path
one /api/children request after the other and laid out every ancestor again per level, and its drawing and
minimap walked the tree recursively ("Maximum call stack size exceeded" on every frame); the page never became
ready again and the details kept saying "Click a node"."""
import urllib.parse

import pytest

from tests.e2e.conftest import Plugin
from tests.tb_plugin.synth_db import chain_name, make_chain_db
from tests.tb_plugin.tb_server import TensorBoardServer

pytestmark = pytest.mark.e2e

DEPTH = 20000
RUN, FILE = "deep", "chain.vis.db"


@pytest.fixture(scope="module")
def deep_tb(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("deep_logs")
    (root / RUN).mkdir()
    make_chain_db(str(root / RUN / FILE), depth=DEPTH)
    monkeypatch_module.setenv("TBPROBE_PLUGIN_CACHE", str(tmp_path_factory.mktemp("deep_index_cache")))
    with TensorBoardServer(root) as tb:
        yield tb


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture
def deep(browser, deep_tb):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    plugin = Plugin(page, deep_tb)
    plugin.page_errors = errors
    yield plugin
    context.close()


def test_the_deepest_node_of_a_20000_level_chain_is_selected_shown_and_detailed(deep):
    deepest = chain_name(DEPTH - 1)
    p = deep.open(urllib.parse.quote(urllib.parse.urlencode(dict(run=RUN, file=FILE))))
    p.testid("search-input").fill(f"d{DEPTH - 1}")
    result = p.testid("search-result")
    result.first.wait_for()
    assert result.count() == 1
    result.first.click()
    p.wait_ready()
    assert p.selected() == deepest
    p.frame.wait_for_function("(n) => document.querySelector('[data-testid=node-details]').textContent.includes(n)",
                              arg=deepest)
    assert "Click a node" not in p.testid("node-details").inner_text()
    assert p.hook(f"nodeRect('NPU', {deepest!r})") is not None           # drawn, on screen
    assert len(p.expanded("NPU")) == DEPTH                                 # every ancestor open
    assert p.testid("breadcrumbs-skipped").inner_text() == f"… {DEPTH + 1 - 40} …"
    assert deep.page_errors == []
    p.shot("deep_chain_selected")
    # the link restores it: the selection's path is opened again in one go (the link keeps 2000 expanded names)
    deep.page.reload()
    p.attach()
    assert p.selected() == deepest
    p.frame.wait_for_function("(n) => document.querySelector('[data-testid=node-details]').textContent.includes(n)",
                              arg=deepest)
    assert p.hook(f"nodeRect('NPU', {deepest!r})") is not None
    assert deep.page_errors == []
