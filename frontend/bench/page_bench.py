"""Browser-side speed of the GRAPH_ASCEND page, measured in Debian's Chromium with Playwright.

Usage: .venv/bin/python frontend/bench/page_bench.py --url http://127.0.0.1:PORT/ --run RUN --file FILE
       [--big Module.big.Big.forward.0] [--repeat 3]
against a running `tensorboard --logdir DIR` whose DIR holds a large compare database (for instance one made by
tests/tb_plugin/synth_db.make_compare_db: 100k nodes per side, one module with 20k children).

Prints: tab opened to graph drawn (cold = first open of the file by the server, warm = again), expand of the big
module until its children are drawn, and frames per second while dragging the view with 20k nodes on screen.
"""
import argparse
import statistics
import time
import urllib.parse

from playwright.sync_api import sync_playwright

ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
READY = "() => !!(window.__tbprobe && window.__tbprobe.ready)"


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1500, "height": 950})
    page.goto(url)
    page.wait_for_function(READY, polling="raf", timeout=120_000)
    # time from navigation start until ready, then one more frame so the canvas is drawn
    return page, page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(performance.now())))")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--big", default="Module.big.Big.forward.0")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    q = urllib.parse.urlencode({"run": a.run, "file": a.file})
    url = a.url.rstrip("/") + "/data/plugin_entry.html?name=graph_ascend#" + q
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        opens = []
        for i in range(a.repeat + 1):
            page, ms = open_page(browser, url)
            opens.append(ms)
            if i < a.repeat:
                page.close()
        marks = page.evaluate("performance.getEntriesByType('mark').filter(m => m.name.startsWith('tbprobe:'))"
                              ".map(m => [m.name, m.startTime])")
        rows.append(("tab opened -> graph drawn, cold (ms)", opens[0]))
        rows.append(("tab opened -> graph drawn, warm median (ms)", statistics.median(opens[1:])))
        rect = page.evaluate(f"() => window.__tbprobe.nodeRect('NPU', {a.big!r})")
        if rect is None:
            page.get_by_test_id("fit-button").click()
            rect = page.evaluate(f"() => window.__tbprobe.nodeRect('NPU', {a.big!r})")
        page.evaluate("() => { performance.clearResourceTimings(); window.__t0 = performance.now(); }")
        page.mouse.dblclick(rect["x"] + rect["w"] / 2, rect["y"] + min(rect["h"] / 2, 8))
        page.wait_for_function(f"() => window.__tbprobe.expanded('NPU').includes({a.big!r})",
                               polling="raf", timeout=60_000)
        first_ms = page.evaluate(
            "() => new Promise(r => requestAnimationFrame(() => r(performance.now() - window.__t0)))")
        page.wait_for_function("() => window.__tbprobe.ready", polling="raf", timeout=60_000)
        all_ms = page.evaluate("() => performance.now() - window.__t0")
        rows.append(("expand the 20k-children module -> its boxes drawn (ms)", first_ms))
        rows.append(("expand -> all 20k names loaded, both sides (ms)", all_ms))
        sent = page.evaluate("() => performance.getEntriesByType('resource')"
                             ".filter(e => e.name.includes('/api/')).map(e => [e.name, e.transferSize])")
        first_kb = sum(size for url, size in sent if "limit=2000" in url and "side=NPU" in url) / 1024
        total_mb = sum(size for _, size in sent) / 2**20
        rows.append(("expand: first response, debug side (KiB)", first_kb))
        rows.append(("expand: all responses, both sides, children + node (MiB)", total_mb))
        page.get_by_test_id("fit-button").click()
        time.sleep(0.5)
        # A drag driven from inside the page: one pointermove per animation frame for 3 s (Playwright's own mouse
        # is a round trip per move and would measure the driver, not the page).
        res = page.evaluate("""() => new Promise((resolve) => {
          const c = document.querySelector('[data-testid=graph-pane-NPU] canvas');
          const r = c.getBoundingClientRect();
          const cx = r.left + r.width / 2, cy = r.top + r.height / 2;
          const ev = (type, x, y) => c.dispatchEvent(new PointerEvent(type, {clientX: x, clientY: y, button: 0,
            bubbles: true, pointerId: 1}));
          const s0 = window.__tbprobe.stats('NPU');
          ev('pointerdown', cx, cy);
          const t0 = performance.now();
          let k = 0, worst = 0, last = t0;
          const step = (now) => {
            worst = Math.max(worst, now - last); last = now;
            k++;
            ev('pointermove', cx + 150 * Math.sin(k / 20), cy + 100 * Math.cos(k / 15));
            if (now - t0 < 3000) requestAnimationFrame(step);
            else {
              ev('pointerup', cx, cy);
              const s1 = window.__tbprobe.stats('NPU');
              resolve({fps: (s1.draws - s0.draws) / ((now - t0) / 1000), worst, visited: s1.visited,
                       drawMs: s1.lastDrawMs});
            }
          };
          requestAnimationFrame(step);
        })""")
        worker = page.evaluate("() => window.__tbprobe.stats('NPU').worker")
        print(f"layout worker in use: {worker}")
        rows.append(("nodes drawn per frame while panning", res["visited"]))
        rows.append(("panning: frames drawn per second", res["fps"]))
        rows.append(("panning: longest frame (ms)", res["worst"]))
        rows.append(("panning: draw time of the last frame (ms)", res["drawMs"]))
        browser.close()
    print("phases of the last open (ms since navigation start): "
          + ", ".join(f"{n.split(':')[1]} {t:.0f}" for n, t in marks))
    w = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(w)}  tbprobe")
    for name, v in rows:
        print(f"{name.ljust(w)}  {v:.1f}")


if __name__ == "__main__":
    main()
