"""GRAPH_ASCEND plugin benchmark: tbprobe's plugin beside the reference (tb-graph-ascend) in one run.

    .venv/bin/python bench/plugin_bench.py [--quick] [--reference /tmp/peers/tbga/bin/tensorboard]

Both serve copies of the same synthetic compare database (about 100k nodes per side, one module with 20k
children; tests/tb_plugin/synth_db.py), each in its own `tensorboard` process, driven by Debian's Chromium.
Measured:
  1. tab opened to graph drawn: from the plugin iframe's navigation start to both panes drawn (in-page clock),
     and to the page ready with complete answers (a big file's first view comes before its index, "partial");
     cold = first open after the server started (tbprobe builds the indexes of the newest databases in the
     background from start-up; "cold, no warm-up" turns that off), warm = a second browser context;
  2. expand of the 20k-children module: tbprobe through the UI (double-click to all children drawn and the page
     ready), its response bytes (compact form, as the page asks) and the object form's server time; the reference's expand request (changeNodeExpandState) timed and sized from its page;
  3. search: tbprobe's server-side search over 1M names (HTTP round trip on localhost, median of 20, after the
     index is built; the cold build is shown too); the reference has no server search: it ships the whole name
     list (loadGraphAllNodeList) to the browser, sized and timed on the 100k database;
  4. frames per second while panning by mouse drag with 20k nodes visible (tbprobe) / the reference's first view.
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.tb_plugin.synth_db import make_compare_db, make_names_db  # noqa: E402
from tests.tb_plugin.tb_server import VENV_TENSORBOARD, TensorBoardServer  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
BIG = "Module.big.Big.forward.0"

# Counts every svg/canvas element through shadow roots (the reference draws one svg group per node).
_DEEP_COUNT = """() => { let n = 0; const walk = (root) => { for (const e of root.querySelectorAll('*')) {
  if (e.tagName === 'rect') n++; if (e.shadowRoot) walk(e.shadowRoot); } }; walk(document); return n; }"""

_STABLE = """async ([countFn, quietMs, minCount, limitMs]) => { const count = eval(countFn);
  let last = count(), lastChange = performance.now(); const start = performance.now();
  while (performance.now() - start < limitMs) { await new Promise(r => requestAnimationFrame(r));
    const c = count(); if (c !== last) { last = c; lastChange = performance.now(); }
    if (last >= minCount && performance.now() - lastChange > quietMs) break; }
  return [lastChange, last]; }"""

_RAF_COUNTER = """() => { window.__frames = 0; const tick = () => { window.__frames++;
  if (!window.__stopFrames) requestAnimationFrame(tick); }; window.__stopFrames = false; requestAnimationFrame(tick); }"""


def plugin_frame(page, timeout_s: float = 120, marker: str = "graph_ascend"):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for f in page.frames:
            if f != page.main_frame and marker in f.url:
                return f
        page.wait_for_timeout(50)
    raise RuntimeError("the plugin iframe never appeared")


def tbprobe_open(browser, tb, run, file):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    state = urllib.parse.quote(urllib.parse.urlencode(dict(run=run, file=file)))
    page.goto(f"{tb.url}/#graph_ascend&ga={state}")
    frame = plugin_frame(page)
    # First view: both panes hold the root and its children (checked once per frame, so they are drawn). A big
    # file opened for the first time is answered from SQLite before its index is ready, without the subtree
    # roll-ups ("partial"); `ready` also waits for the page to have swapped in the complete answers.
    first = frame.wait_for_function(
        "() => window.__tbprobe && window.__tbprobe.visibleNodes('NPU').length > 1"
        " && window.__tbprobe.visibleNodes('Bench').length > 1 ? performance.now() : false",
        polling="raf", timeout=300000).json_value()
    done = frame.wait_for_function(
        "() => window.__tbprobe.ready && window.__tbprobe.visibleNodes('NPU').length > 1"
        " && window.__tbprobe.visibleNodes('Bench').length > 1 ? performance.now() : false",
        polling="raf", timeout=300000).json_value()
    return ctx, page, frame, first / 1000, done / 1000


def reference_open(browser, tb):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    page.goto(f"{tb.url}/#graph_ascend")
    # The reference's module replaces its iframe page by index.html: its clock starts there (in its favour).
    frame = plugin_frame(page, marker="graph_ascend/index.html")
    frame.wait_for_load_state()
    last_change, count = frame.evaluate(_STABLE, [_DEEP_COUNT, 2500, 10, 300000])
    return ctx, page, frame, last_change / 1000, count


def fps_while_panning(page, frame, pane_selector: str, seconds: float = 2.0) -> float:
    box = frame.locator(pane_selector).first.bounding_box()
    ibox = page.locator("iframe").first.bounding_box()
    x0, y0 = ibox["x"] + box["x"] + box["width"] / 2, ibox["y"] + box["y"] + box["height"] / 2
    frame.evaluate(_RAF_COUNTER)
    t0 = frame.evaluate("() => performance.now()")
    page.mouse.move(x0, y0)
    page.mouse.down()
    end = time.time() + seconds
    k = 0
    while time.time() < end:
        k += 1
        page.mouse.move(x0 + 150 * ((k % 20) / 10 - 1), y0 + 80 * ((k % 14) / 7 - 1))
        page.wait_for_timeout(16)
    page.mouse.up()
    frames, t1 = frame.evaluate("() => { window.__stopFrames = true; return [window.__frames, performance.now()]; }")
    return frames / ((t1 - t0) / 1000)


def http_get(url: str):
    """(round-trip seconds, body, server seconds from the Server-Timing header or None)."""
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as resp:
        body = resp.read()
        timing = resp.headers.get("Server-Timing") or ""
    server = float(timing.split("dur=")[1]) / 1000 if "dur=" in timing else None
    return time.perf_counter() - t, body, server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20k nodes, 5k children, 200k names")
    ap.add_argument("--reference", default=os.path.join(os.environ.get("PEERS_DIR", "/tmp/peers"), "tbga", "bin",
                                                        "tensorboard"))
    ap.add_argument("--keep", help="keep the generated databases in this folder")
    args = ap.parse_args()
    n_nodes, big_children, n_names = (20_000, 5_000, 200_000) if args.quick else (100_000, 20_000, 1_000_000)
    work = args.keep or tempfile.mkdtemp(prefix="plugin_bench_")
    if not args.keep:
        atexit.register(shutil.rmtree, work, True)
    ours, theirs = os.path.join(work, "tbprobe_logs"), os.path.join(work, "reference_logs")
    for d in (os.path.join(ours, "big"), os.path.join(ours, "names"), os.path.join(theirs, "big")):
        os.makedirs(d, exist_ok=True)
    db = os.path.join(ours, "big", "compare_big.vis.db")
    names_db = os.path.join(ours, "names", "build_names.vis.db")
    t = time.time()
    if not os.path.exists(db):
        make_compare_db(db, n_nodes=n_nodes, big_children=big_children)
    if not os.path.exists(names_db):
        make_names_db(names_db, n_nodes=n_names)
    shutil.copy(db, os.path.join(theirs, "big", "compare_big.vis.db"))
    print(f"databases: {n_nodes} nodes per side ({big_children} children in {BIG}), {n_names} names;"
          f" made in {time.time() - t:.0f} s under {work}", flush=True)
    have_ref = os.path.exists(args.reference)
    os.environ["TBPROBE_PLUGIN_CACHE"] = os.path.join(work, "index_cache")
    shutil.rmtree(os.environ["TBPROBE_PLUGIN_CACHE"], ignore_errors=True)  # a cold first open, honestly
    rows = []

    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        os.environ["TBPROBE_PLUGIN_WARMUP"] = "0"
        with TensorBoardServer(ours, binary=VENV_TENSORBOARD, timeout=300) as tb:
            ctx, page, frame, cold_plain, cold_plain_done = tbprobe_open(browser, tb, "big", "compare_big.vis.db")
            ctx.close()
        print(f"tbprobe: tab open cold without start-up warm-up {cold_plain:.2f} s"
              f" (complete {cold_plain_done:.2f} s)", flush=True)
        os.environ.pop("TBPROBE_PLUGIN_WARMUP")
        shutil.rmtree(os.environ["TBPROBE_PLUGIN_CACHE"], ignore_errors=True)
        with TensorBoardServer(ours, binary=VENV_TENSORBOARD, timeout=300) as tb:
            api = tb.url + "/data/plugin/graph_ascend/api"
            ctx, page, frame, cold, cold_done = tbprobe_open(browser, tb, "big", "compare_big.vis.db")
            ctx.close()
            ctx, page, frame, warm, warm_done = tbprobe_open(browser, tb, "big", "compare_big.vis.db")
            print(f"tbprobe: tab open cold {cold:.2f} s (complete {cold_done:.2f} s), warm {warm:.2f} s"
                  f" (complete {warm_done:.2f} s)", flush=True)
            sizes = {}
            def on_response(r):
                if "api/children" in r.url and urllib.parse.quote(BIG) in r.url and "side=NPU" in r.url:
                    sizes["json"] = sizes.get("json", 0) + len(r.body())
                    sizes["wire"] = sizes.get("wire", 0) + int(r.headers.get("content-length") or len(r.body()))
            page.on("response", on_response)
            rect = frame.evaluate("(n) => window.__tbprobe.nodeRect('NPU', n)", BIG)
            ibox = page.locator("iframe").first.bounding_box()
            t0 = frame.evaluate("() => performance.now()")
            page.mouse.dblclick(ibox["x"] + rect["x"] + rect["w"] / 2, ibox["y"] + rect["y"] + rect["h"] / 2)
            t1 = frame.wait_for_function(
                "(n) => window.__tbprobe.ready && window.__tbprobe.expanded('NPU').includes(n)"
                " ? performance.now() : false", arg=BIG, polling="raf", timeout=120000).json_value()
            expand_ui = (t1 - t0) / 1000
            page.wait_for_timeout(1500)  # the rest of the children list (it arrives in two requests)
            json_bytes = sizes.get("json")
            q = dict(run="big", file="compare_big.vis.db", step=0, rank=0, side="NPU", node=BIG, limit=50000)
            object_http, object_body, object_server = http_get(api + "/children?" + urllib.parse.urlencode(q))
            expand_http, body, expand_server = http_get(api + "/children?" + urllib.parse.urlencode(dict(q, compact=1)))
            expand_bytes = sizes.get("wire", len(body))
            print(f"tbprobe: expand UI {expand_ui:.2f} s, HTTP {expand_http:.3f} s, {expand_bytes} bytes on the wire"
                  f" ({json_bytes} bytes of JSON), debug pane", flush=True)
            fps = fps_while_panning(page, frame, "[data-testid=graph-pane-NPU] canvas")
            visible = len(frame.evaluate("() => window.__tbprobe.visibleNodes('NPU')"))
            ctx.close()
            sq = dict(run="names", file="build_names.vis.db", step=0, rank=0, side="NPU", limit=100)
            cold_search, _, _ = http_get(api + "/search?" + urllib.parse.urlencode(dict(sq, q="Torch.matmul.4242")))
            times, round_trips = [], []
            for k in range(20):
                needle = f"matmul.{(k * 7919) % n_names}."
                dt, body, server = http_get(api + "/search?" + urllib.parse.urlencode(dict(sq, q=needle)))
                round_trips.append(dt)
                times.append(server if server is not None else dt)
            search = statistics.median(times)
            search_rt = statistics.median(round_trips)
            total = json.loads(body)["total"]
            print(f"tbprobe: search over {n_names} names median {search * 1000:.1f} ms server,"
                  f" {search_rt * 1000:.1f} ms round trip (cold {cold_search:.1f} s)", flush=True)
        rows += [("tab opened to graph drawn, cold, no start-up warm-up (s)", cold_plain),
                 ("  same, complete (subtree roll-ups in, page ready) (s)", cold_plain_done),
                 ("tab opened to graph drawn, cold (s)", cold),
                 ("  same, complete (s)", cold_done),
                 ("tab opened to graph drawn, warm (s)", warm),
                 (f"expand {big_children} children, double-click to all drawn and ready (s)", expand_ui),
                 ("expand, server answer, compact (s)", expand_http),
                 ("expand, server time only, compact (s)", expand_server or expand_http),
                 ("expand, server time only, object form (s)", object_server or object_http),
                 ("expand, response bytes as the page got them (on the wire, both requests)", expand_bytes),
                 ("expand, response JSON bytes, compact (uncompressed)", json_bytes or len(body)),
                 ("expand, response JSON bytes, object form (uncompressed)", len(object_body)),
                 (f"search over {n_names} names, server time (ms, median of 20)", search * 1000),
                 ("search, HTTP round trip (ms)", search_rt * 1000),
                 (f"search, first query (builds the index of {n_names} names) (s)", cold_search),
                 (f"FPS panning, {visible} nodes visible", fps)]
        ref = {}
        if have_ref:
            with TensorBoardServer(theirs, binary=args.reference, timeout=300) as tb:
                ctx, page, frame, rcold, rcount = reference_open(browser, tb)
                ctx.close()
                ctx, page, frame, rwarm, _ = reference_open(browser, tb)
                print(f"reference: tab open cold {rcold:.2f} s, warm {rwarm:.2f} s ({rcount} rects)", flush=True)
                meta = {"run": "big", "tag": "compare_big", "microStep": -1, "type": "db", "lang": "en", "step": 0,
                        "rank": 0}
                timing = frame.evaluate(
                    """async ([big, meta]) => { const t = performance.now();
                      const r = await fetch('changeNodeExpandState', {method: 'POST', headers: {'Content-Type':
                        'application/json'}, body: JSON.stringify({nodeInfo: {nodeName: big, nodeType: 'NPU'},
                        metaData: meta})});
                      const text = await r.text(); return [performance.now() - t, text.length]; }""", [BIG, meta])
                names = frame.evaluate(
                    """async (meta) => { const t = performance.now();
                      const r = await fetch('loadGraphAllNodeList', {method: 'POST', headers: {'Content-Type':
                        'application/json'}, body: JSON.stringify({metaData: meta})});
                      const text = await r.text(); return [performance.now() - t, text.length]; }""", meta)
                rfps = fps_while_panning(page, frame, "iframe, body")
                ctx.close()
                ref = {"cold": rcold, "warm": rwarm, "expand": timing[0] / 1000, "expand_bytes": timing[1],
                       "names_s": names[0] / 1000, "names_bytes": names[1], "fps": rfps}
        browser.close()

    print()
    print("| measure | tbprobe | reference | ratio (reference / tbprobe) |")
    print("|---|---|---|---|")
    pairs = {"tab opened to graph drawn, cold (s)": ref.get("cold"),
             "tab opened to graph drawn, cold, no start-up warm-up (s)": ref.get("cold"),
             "tab opened to graph drawn, warm (s)": ref.get("warm"),
             "expand, server answer, compact (s)": ref.get("expand"),
             "expand, response bytes as the page got them (on the wire, both requests)": ref.get("expand_bytes"),
             "expand, response JSON bytes, compact (uncompressed)": ref.get("expand_bytes")}
    for name, value in rows:
        other = pairs.get(name)
        ratio = f"{other / value:.1f}x" if other and value else ""
        fmt = (lambda v: f"{v:,.0f}") if "bytes" in name else (lambda v: f"{v:.3g}")
        print(f"| {name} | {fmt(value)} | {fmt(other) if other is not None else '-'} | {ratio} |")
    if ref:
        print(f"| reference: whole name list shipped for search ({n_nodes} nodes) | - | {ref['names_bytes']:,} bytes,"
              f" {ref['names_s']:.2f} s | |")
        print(f"| reference: FPS panning its first view | - | {ref['fps']:.3g} | |")
    else:
        print(f"| reference | not installed at {args.reference}: run ../shared/peers/setup.sh | | |")
    print(f"\nsearch: {total} hits for the last query; timings are wall clock on this machine, one run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
