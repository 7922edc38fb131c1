"""The GRAPH_ASCEND tab in a real Chromium against a real tensorboard process (see conftest.py)."""
import json
import os
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.e2e.conftest import (
    COLLECTED_RUN,
    DIVERGENT_RUN,
    MSPROBE_RUN,
    MULTIRANK_RUN,
    TBPROBE_RUN,
    XSS_NAME,
    XSS_RUN,
    db_name,
)

pytestmark = pytest.mark.e2e

BLOCK1 = "Module.layers.1.Block.forward.0"


def ga(run: str, file: str, **extra) -> str:
    return urllib.parse.quote(urllib.parse.urlencode(dict(run=run, file=file, **extra)))


@pytest.mark.parametrize("run", [MSPROBE_RUN, TBPROBE_RUN])
def test_tab_appears_and_both_graphs_draw(plugin, e2e_logdir, run):
    p = plugin.open(ga(run, db_name(e2e_logdir, run)))
    assert plugin.page.get_by_text("GRAPH_ASCEND").first.is_visible()
    for side in ("NPU", "Bench"):
        shown = p.visible(side)
        assert "DefaultModel" in shown and BLOCK1 in shown
        assert p.testid(f"graph-pane-{side}").is_visible()
    assert p.testid("minimap").count() >= 1
    p.shot(f"graph_{run}_en")


def test_expand_and_collapse_with_synchronised_panes(plugin, e2e_logdir):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    assert "Module.layers.1.fc.Linear.forward.0" not in p.visible("NPU")
    p.dblclick_node("NPU", BLOCK1)
    assert BLOCK1 in p.expanded("NPU")
    assert "Module.layers.1.fc.Linear.forward.0" in p.visible("NPU")
    assert "Torch.exp.0.forward" in p.visible("NPU")
    assert BLOCK1 in p.expanded("Bench")  # the bench pane follows
    assert "Module.layers.1.fc.Linear.forward.0" in p.visible("Bench")
    p.dblclick_node("NPU", BLOCK1)
    assert BLOCK1 not in p.expanded("NPU")
    assert "Torch.exp.0.forward" not in p.visible("NPU")


def test_search_and_jump_then_details(plugin, e2e_logdir):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    p.testid("search-input").fill("exp.0")
    p.frame.wait_for_function("() => document.querySelector('[data-testid=search-count]').textContent.trim() === '1'")
    results = p.testid("search-result")
    assert results.count() == 1 and results.first.inner_text().startswith("Torch.exp.0.forward")
    results.first.click()
    p.wait_ready()
    assert p.selected() == "Torch.exp.0.forward"
    assert "Torch.exp.0.forward" in p.visible("NPU") and BLOCK1 in p.expanded("NPU")  # ancestors opened
    details = p.testid("node-details")
    assert "Torch.exp.0.forward" in details.inner_text()
    assert p.testid("details-outputs").count() >= 1 and "critical" in details.inner_text()
    p.shot("search_and_details_en")


def test_data_flow_links_walk_to_the_producer(plugin, e2e_logdir):
    """A collected run's node panel names the records that made its inputs and read its outputs; a click on one
    selects it."""
    p = plugin.open(ga(COLLECTED_RUN, db_name(e2e_logdir, COLLECTED_RUN)))
    p.testid("search-input").fill("relu.0.forward")
    p.frame.wait_for_function("() => document.querySelector('[data-testid=search-count]').textContent.trim() === '1'")
    p.testid("search-result").first.click()
    p.wait_ready()
    assert p.selected() == "Torch.relu.0.forward"
    flow = p.testid("details-flow")
    assert flow.count() == 1
    assert [a.inner_text() for a in p.testid("flow-producer").all()] == ["Functional.linear.0.forward"]
    assert [a.inner_text() for a in p.testid("flow-consumer").all()] == ["Functional.linear.1.forward"]
    p.shot("data_flow_en")
    p.testid("flow-producer").first.click()
    p.frame.wait_for_function("() => window.__tbprobe.selected() === 'Functional.linear.0.forward'")
    p.wait_ready()
    assert "Functional.linear.0.forward" in p.testid("node-details").inner_text()
    consumers = sorted(a.inner_text() for a in p.testid("flow-consumer").all())
    assert consumers == ["Tensor.__add__.0.forward", "Torch.relu.0.forward"]
    # the reference's files have no data flow: no section
    p.choose_file(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN))
    p.click_node("NPU", "Module.head.Linear.forward.0")
    assert p.testid("details-flow").count() == 0


def test_selection_is_linked_across_panes(plugin, e2e_logdir):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    p.click_node("NPU", "Module.head.Linear.forward.0")
    assert p.selected() == "Module.head.Linear.forward.0"
    text = p.testid("node-details").inner_text()
    assert "Module.head.Linear.forward.0" in text
    assert "Max diff" in text or "MaxRelativeErr" in text  # debug, bench and difference columns
    p.page.wait_for_function("() => decodeURIComponent(decodeURIComponent(location.hash))"
                             ".includes('sel=NPU:Module.head.Linear.forward.0')", timeout=10000)
    p.click_node("Bench", "Module.head.Linear.forward.0")
    assert p.selected() == "Module.head.Linear.forward.0"


def test_overflow_filter_lists_the_critical_node(plugin, e2e_logdir):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    p.testid("overflow-filter").get_by_label("critical").check()
    p.frame.wait_for_function("() => document.querySelectorAll('[data-testid=filter-result]').length === 1")
    assert p.testid("filter-result").first.inner_text().startswith("Torch.exp.0.forward")
    p.testid("view-tab-overflow").click()
    p.wait_ready()
    p.frame.wait_for_function("() => document.querySelectorAll('[data-testid=overflow-item]').length === 2",
                              timeout=30000)
    items = p.testid("overflow-item")
    assert items.count() == 2 and "Tensor.__mul__.1.forward" in items.first.inner_text()
    p.shot("overflow_en")
    p.testid("view-tab-compare").click()
    p.wait_ready()
    p.frame.wait_for_function("() => document.querySelectorAll('[data-testid=compare-row]').length > 10",
                              timeout=30000)
    p.shot("compare_en")


def test_manual_match_goes_to_the_side_file_and_survives_a_reload(plugin, e2e_logdir):
    file = db_name(e2e_logdir, TBPROBE_RUN)
    p = plugin.open(ga(TBPROBE_RUN, file, xn=f"DefaultModel\n{BLOCK1}", xb=f"DefaultModel\n{BLOCK1}"))
    p.click_node("NPU", "Tensor.__mul__.1.forward")
    p.click_node("Bench", "Tensor.__add__.1.forward")
    p.testid("match-button").click()
    p.wait_ready()
    side = e2e_logdir / TBPROBE_RUN / (file[: -len(".vis.db")] + "_0_0.vis.config")
    for _ in range(50):
        if side.exists():
            break
        p.page.wait_for_timeout(100)
    assert json.loads(side.read_text()) == {"Tensor.__mul__.1.forward": "Tensor.__add__.1.forward"}
    p.page.reload()
    p.attach()
    assert "1" in p.frame.get_by_text("manual matches").first.inner_text()
    p.click_node("NPU", "Tensor.__mul__.1.forward")
    assert "Tensor.__add__.1.forward" in p.testid("node-details").inner_text()
    side.unlink()


def test_the_url_restores_the_view(plugin, e2e_logdir, browser):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    p.dblclick_node("NPU", BLOCK1)
    p.click_node("NPU", "Torch.exp.0.forward")
    p.page.wait_for_function("() => decodeURIComponent(decodeURIComponent(location.hash))"
                             ".includes('sel=NPU:Torch.exp.0.forward')", timeout=10000)
    url = p.page.url
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        from tests.e2e.conftest import Plugin
        again = Plugin(context.new_page(), p.tb)
        again.page.goto(url)
        again.attach()
        assert again.selected() == "Torch.exp.0.forward"
        assert BLOCK1 in again.expanded("NPU") and "Torch.exp.0.forward" in again.visible("NPU")
    finally:
        context.close()


def test_hostile_node_name_shows_as_text(plugin, e2e_logdir):
    p = plugin.open(ga(XSS_RUN, db_name(e2e_logdir, XSS_RUN)))
    assert XSS_NAME in p.visible("NPU")
    p.testid("search-input").fill("<img")
    p.frame.wait_for_function("() => document.querySelector('[data-testid=search-count]').textContent.trim() === '1'")
    assert p.testid("search-result").first.inner_text().startswith(XSS_NAME)
    p.testid("search-result").first.click()
    p.wait_ready()
    assert XSS_NAME in p.testid("node-details").inner_text()
    assert p.frame.evaluate("() => document.querySelectorAll('img[src=x]').length") == 0
    assert p.frame.evaluate("() => document.querySelectorAll('img').length") == 0
    assert p.dialogs == []  # alert(1) never ran


def test_cross_origin_post_is_refused(plugin, e2e_logdir, tensorboard):
    file = db_name(e2e_logdir, MSPROBE_RUN)
    body = dict(run=MSPROBE_RUN, file=file, step=0, rank=0, debug="Tensor.__mul__.1.forward",
                bench="Tensor.__add__.1.forward")
    url = tensorboard.url + "/data/plugin/graph_ascend/api/match"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 403
    # and from a page of another origin, through the browser (it sends its own Origin)
    p = plugin.open(ga(MSPROBE_RUN, file))
    other = f"http://localhost:{tensorboard.port}"  # another origin for the browser (host differs)
    status = p.page.evaluate(
        """async ([url, body]) => { try { const r = await fetch(url, {method: 'POST', mode: 'cors',
             headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)}); return r.status; }
             catch (e) { return 'blocked'; } }""",
        [url.replace("127.0.0.1", "localhost") if other else url, body])
    assert status in (403, "blocked")
    assert not [n for n in os.listdir(e2e_logdir / MSPROBE_RUN) if n.endswith(".vis.config")]


def test_chinese_screenshots(plugin, e2e_logdir):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN), lang="zh", xn=f"DefaultModel\n{BLOCK1}"))
    assert p.testid("lang-select").input_value() == "zh"
    p.shot("graph_msprobe_built_zh")
    for tab in ("compare", "overflow"):
        p.testid(f"view-tab-{tab}").click()
        p.wait_ready()
        p.shot(f"{tab}_zh")


def test_monitor_view_is_mounted_again_in_the_new_language(plugin, e2e_logdir):
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    p.testid("view-tab-monitor").click()
    p.frame.wait_for_selector("[data-testid=monitor-toolbar]")
    english = p.testid("monitor-toolbar").inner_text()
    assert english and not any("\u4e00" <= ch <= "\u9fff" for ch in english)
    p.testid("lang-select").select_option("zh")
    # The page rebuilds itself in the new language and keeps the Monitor tab open.
    p.frame.wait_for_function(
        "() => { const t = document.querySelectorAll('[data-testid=monitor-toolbar]');"
        " return t.length === 1 && /[\\u4e00-\\u9fff]/.test(t[0].innerText); }", timeout=30000)
    assert p.testid("monitor-root").count() == 1
    p.shot("monitor_zh")


def test_node_details_can_be_reached_in_a_small_window(plugin, e2e_logdir):
    """The graph column scrolls when its panes and the details panel do not fit; a normal window does not need to."""
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    overflow = "() => { const m = document.querySelector('.ga-graph-main'); return m.scrollHeight - m.clientHeight; }"
    assert p.frame.evaluate(overflow) <= 0
    plugin.page.set_viewport_size({"width": 560, "height": 420})
    p.frame.wait_for_function("() => innerHeight < 420")
    details = p.testid("node-details")
    details.scroll_into_view_if_needed()
    bottom, height = p.frame.evaluate("() => [document.querySelector('[data-testid=node-details]')"
                                      ".getBoundingClientRect().bottom, innerHeight]")
    assert bottom <= height + 1, f"the details panel ends at {bottom}px, below the {height}px frame"
    p.shot("small_window_details")


def test_going_to_the_first_divergence_says_why(plugin, e2e_logdir, tensorboard):
    """The page went to the first divergence, often a node drawn as passing, with no word why: a notice and a line
    in its details now say why it was chosen (its inputs, its output's figure, what differs)."""
    file = db_name(e2e_logdir, DIVERGENT_RUN)
    url = (tensorboard.url + "/data/plugin/graph_ascend/api/findings?"
           + urllib.parse.urlencode(dict(run=DIVERGENT_RUN, file=file, step=0, rank=0)))
    with urllib.request.urlopen(url, timeout=30) as resp:
        first = json.load(resp)["first_divergence"]
    assert first["name"] == "Module.fc.Linear.forward.0" and first["why"]["flagged"] is False
    p = plugin.open(ga(DIVERGENT_RUN, file))
    p.testid("view-tab-compare").click()
    p.wait_ready()
    p.testid("first-divergence-button").click()
    p.frame.wait_for_function("(n) => window.__tbprobe.selected() === n", arg=first["name"], timeout=30000)
    p.wait_ready()
    notice = p.testid("notice-text")
    p.frame.wait_for_function("() => document.querySelector('[data-testid=notice-text]').textContent.length > 0")
    assert notice.inner_text().startswith("First divergence: its inputs match the bench, its output differs "
                                          "(NormRelativeErr 200 %); a parameter or argument differs: "
                                          "parameters.weight; drawn as passing")
    line = p.testid("details-first-divergence")
    assert line.count() == 1 and line.inner_text() == notice.inner_text()
    p.shot("first_divergence_why_en")


def test_the_graph_tab_goes_to_the_runs_first_divergence_from_a_rank_without_one(plugin, e2e_logdir):
    """On a step and rank with no first divergence of its own (a difference that came in through a collective) the
    button said "No divergence found.", and only the Compare tab had it. The Graph tab's button now goes to the
    run's first divergence, switching step and rank, and says why."""
    p = plugin.open(ga(MULTIRANK_RUN, db_name(e2e_logdir, MULTIRANK_RUN)))
    assert p.testid("step-select").input_value() == "0" and p.testid("rank-select").input_value() == "0"
    p.testid("graph-first-divergence").click()
    p.frame.wait_for_function("(n) => window.__tbprobe.selected() === n", arg="Module.fc.Linear.forward.0",
                              timeout=30000)
    p.wait_ready()
    assert p.testid("step-select").input_value() == "1" and p.testid("rank-select").input_value() == "1"
    p.frame.wait_for_function("() => document.querySelector('[data-testid=notice-text]').textContent.length > 0")
    assert p.testid("notice-text").inner_text().startswith(
        "No divergence starts at step 0 rank 0 (a difference there came in from another rank): this is the run's "
        "first. First divergence: its inputs match the bench")
    p.shot("first_divergence_other_rank")


def test_the_minimap_leaves_the_labels_under_it_readable(plugin, e2e_logdir):
    """The minimap covered the labels in the bottom-right of each pane: it is translucent until pointed at, and its
    button hides it (remembered on reload), leaving the graph's canvas under that corner."""
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    minimap = p.testid("minimap")
    assert float(minimap.evaluate("m => getComputedStyle(m).opacity")) < 0.6
    centre = minimap.evaluate("m => { const r = m.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }")
    under = "([x, y]) => document.elementFromPoint(x, y).className"
    assert p.frame.evaluate(under, centre) == "ga-minimap"
    p.testid("minimap-toggle").click()
    assert minimap.is_hidden()
    assert p.frame.evaluate(under, centre) == "ga-canvas"
    p.page.reload()
    p.attach()
    assert p.testid("minimap").is_hidden()
    p.testid("minimap-toggle").click()
    assert p.testid("minimap").is_visible()


def test_the_three_js_warning_is_tensorboards_not_the_plugins(plugin, e2e_logdir):
    """"Multiple instances of Three.js being imported." shows on every page: TensorBoard's own index.js bundles two
    copies of three.js (its projector and another dashboard); the plugin bundles none and its frame logs no such
    warning."""
    messages = []
    plugin.page.on("console", lambda m: messages.append((m.text, m.location.get("url", ""))))
    p = plugin.open(ga(MSPROBE_RUN, db_name(e2e_logdir, MSPROBE_RUN)))
    p.page.wait_for_timeout(500)
    three = [url for text, url in messages if "Three.js" in text]
    assert all("graph_ascend" not in url for url in three), three
    bundle = os.path.join(os.path.dirname(__file__), "..", "..", "tbprobe", "tb_plugin", "static", "index.js")
    with open(bundle, encoding="utf-8") as f:
        assert "__THREE__" not in f.read()
