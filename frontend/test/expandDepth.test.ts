// @vitest-environment jsdom
// "Expand to depth" on a wide graph (a module with 5,000 children): it asked /api/children once per node (6,000
// requests, 63 s for both sides) and stopped at 3,000 nodes without a word.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ApiClient } from "../src/api/client";
import type { NodeSummary } from "../src/api/types";
import { GraphPane, MAX_AUTO_EXPAND } from "../src/views/graphPane";
import { compactOf, jsonResponse, paneHost, summary } from "./helpers";

function server(wide: number) {
  // DefaultModel > m0..m(wide-1) > each one leaf
  const kids = (node: string): NodeSummary[] => {
    if (node === "DefaultModel") return Array.from({ length: wide }, (_, i) => summary(`m${i}`, 1, { order: i }));
    if (/^m\d+$/.test(node)) return [summary(`${node}.leaf`, 0, { order: wide + Number(node.slice(1)) })];
    return [];
  };
  const compact = compactOf;
  const json = jsonResponse;
  const routes: string[] = [];
  const fetchFn = async (input: string) => {
    const url = new URL(input);
    const route = url.pathname.replace(/^.*\/api\//, "");
    routes.push(route);
    const node = url.searchParams.get("node") ?? "";
    const limit = Number(url.searchParams.get("limit") ?? "2000");
    if (route === "root") return json({ ...summary("DefaultModel", wide), order: 2 * wide });
    if (route === "children") {
      const offset = Number(url.searchParams.get("offset") ?? "0");
      const list = kids(node);
      return json({ node, total: list.length, offset, compact: compact(list.slice(offset, offset + limit)) });
    }
    if (route === "depth_children") {   // breadth first, as the plugin's GraphData.depth_children
      const depth = Number(url.searchParams.get("depth"));
      const maxNodes = Number(url.searchParams.get("max_nodes"));
      const levels: { node: string; total: number; count: number }[] = [];
      const pages: NodeSummary[] = [];
      let frontier = ["DefaultModel"];
      let capped = false;
      for (let d = 0; d < depth && !capped; d++) {
        const next: string[] = [];
        for (const n of frontier) {
          const list = kids(n);
          if (!list.length) continue;
          if (levels.length >= maxNodes) { capped = true; break; }
          levels.push({ node: n, total: list.length, count: Math.min(limit, list.length) });
          pages.push(...list.slice(0, limit));
          next.push(...list.map((s) => s.name));
        }
        frontier = next;
      }
      return json({ levels, complete: true, capped, compact: compact(pages) });
    }
    return new Response(JSON.stringify({ error: "no such route" }), { status: 404 });
  };
  return { fetchFn, routes };
}

function paneOn(fetchFn: unknown) {
  const api = new ApiClient("http://tb/data/plugin/graph_ascend/", fetchFn as never);
  return new GraphPane("NPU", paneHost(api), "minimap");
}

describe("expand to depth", () => {
  beforeAll(() => {
    vi.stubGlobal("ResizeObserver", class { observe() {} disconnect() {} });
    vi.stubGlobal("requestAnimationFrame", (fn: FrameRequestCallback) => setTimeout(() => fn(0), 0));
    HTMLCanvasElement.prototype.getContext = (() => null) as never;
  });
  afterAll(() => vi.unstubAllGlobals());

  it("asks for every page it opens in one request", async () => {
    const { fetchFn, routes } = server(40);
    const pane = paneOn(fetchFn);
    await pane.load();
    routes.length = 0;
    expect(await pane.expandToDepth(2)).toBe(false);
    expect(routes).toEqual(["depth_children"]);    // (it was one /api/children per node)
    expect(pane.expandedNames().length).toBe(41);
    expect(pane.shownNames()).toContain("m39.leaf");
    pane.dispose();
  });

  it("says when it stopped at its cap", async () => {
    const { fetchFn } = server(MAX_AUTO_EXPAND + 1);
    const pane = paneOn(fetchFn);
    await pane.load();
    expect(await pane.expandToDepth(2)).toBe(true);
    expect(pane.expandedNames().length).toBe(MAX_AUTO_EXPAND);
    pane.dispose();
  });
});
