// @vitest-environment jsdom
// A graph nested 20,000 levels deep (a generated or hostile file): the page walked such paths recursively (the
// drawing and the minimap overflowed the call stack on every frame), opened them one level and one request at a
// time, and laid out every ancestor again per level: a click on the deepest node never selected it.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ApiClient, sliceCompact } from "../src/api/client";
import type { CompactChildren, NodeSummary } from "../src/api/types";
import type { LayoutEngine } from "../src/layout/engine";
import {
  absPos, coveringNode, expand, expandChain, makeNode, setChildren, shownNodes, walkVisible, type LayoutNode,
} from "../src/layout/tree";
import { Camera } from "../src/render/camera";
import { LIGHT } from "../src/render/colors";
import { drawTree, type Paint } from "../src/render/draw";
import { Minimap } from "../src/render/minimap";
import { FIRST_PAGE } from "../src/views/childPages";
import { GraphPane } from "../src/views/graphPane";
import { compactOf, jsonResponse, paneHost, summary } from "./helpers";

const name = (level: number) => `Module.d${level}.L.forward.0`;

/** root > d0 > d1 > ... > d(depth-1), every level expanded (laid out as expandChain does) */
function chain(depth: number): { root: LayoutNode; deepest: LayoutNode; nodes: LayoutNode[] } {
  const root = makeNode(summary("DefaultModel", 1), null, 0);
  const nodes = [root];
  let n = root;
  for (let i = 0; i < depth; i++) {
    const [k] = setChildren(n, [summary(name(i), i < depth - 1 ? 1 : 0)]);
    nodes.push(k);
    n = k;
  }
  expandChain(nodes.slice(0, -1));
  return { root, deepest: n, nodes };
}

function recorder() {
  const calls = { rect: 0, fillText: [] as string[] };
  const ctx = {
    fillStyle: "", strokeStyle: "", lineWidth: 1, font: "", textBaseline: "",
    fillRect: () => undefined, beginPath: () => undefined, rect: () => calls.rect++, fill: () => undefined,
    stroke: () => undefined, strokeRect: () => undefined, fillText: (t: string) => calls.fillText.push(t),
    measureText: (t: string) => ({ width: t.length * 7 }),
  };
  return { ctx: ctx as unknown as CanvasRenderingContext2D, calls };
}

const paint: Paint = {
  fill: () => "#FFFCF3", badge: () => null, selected: null, counterpart: null, highlighted: new Set(), theme: LIGHT,
};

describe("a graph 20,000 levels deep: walks without recursion", () => {
  it("walks, draws and rebuilds the minimap of the whole chain without overflowing the stack", async () => {
    const { root, deepest } = chain(20000);
    let visited = 0;
    walkVisible(root, root.x, root.y, root.w, root.h, () => void visited++);
    expect(visited).toBe(20001);
    expect(shownNodes(root).length).toBe(20001);
    // zoomed on the deepest node: drawn from the deepest box holding the view, not through its 20,000 ancestors
    const cam = new Camera();
    const p = absPos(deepest);
    cam.scale = 1;
    cam.centerOn(p.x + deepest.w / 2, p.y + deepest.h / 2, 1200, 800);
    const { ctx, calls } = recorder();
    const stats = drawTree(ctx, root, cam, 1200, 800, { ...paint, selected: deepest.name });
    expect(stats.visited).toBeLessThan(100);
    expect(calls.fillText.some((t) => t.includes("d19999"))).toBe(true);
    const tl = cam.toWorld(0, 0);
    expect(coveringNode(root, tl.x, tl.y, 1200, 800).node.depth).toBeGreaterThan(19900);
    // zoomed out on the whole graph it still draws (every level at once)
    cam.fit(0, 0, root.w, root.h, 1200, 800);
    expect(() => drawTree(ctx, root, cam, 1200, 800, paint)).not.toThrow();
    const minimap = new Minimap("minimap", () => undefined);
    const engine = { minimap: async () => null } as unknown as LayoutEngine;
    await expect(minimap.rebuild(root, () => "#FFFCF3", LIGHT, engine)).resolves.toBeUndefined();
  });

  it("expandChain lays out a chain as expanding it level by level does", () => {
    const build = () => {
      const root = makeNode(summary("root", 3), null, 0);
      const path = [root];
      let n = root;
      for (let d = 0; d < 6; d++) {
        const kids = setChildren(n, Array.from({ length: 3 + d }, (_, i) => summary(`${n.name}.${i}`, i === 1 ? 4 : 0)));
        n = kids[1];
        path.push(n);
      }
      return path;
    };
    const one = build();
    for (const n of one.slice(0, -1)) expand(n);
    const all = build();
    expand(all[0]);   // (the root shown first, as on load)
    expandChain(all.slice(1, -1));
    const where = (nodes: LayoutNode[]) => shownNodes(nodes[0]).map((n) => [n.name, absPos(n), n.w, n.h]);
    expect(where(all)).toEqual(where(one));
  });
});

describe("revealing a node 5,000 levels deep", () => {
  const DEPTH = 5000;
  const kids = (node: string): NodeSummary[] => {
    if (node === "DefaultModel") return [summary(name(0), 1, { order: 0 })];
    const level = Number(/^Module\.d(\d+)\./.exec(node)![1]);
    return level < DEPTH - 1 ? [summary(name(level + 1), level < DEPTH - 2 ? 1 : 0, { order: level + 1 })] : [];
  };
  const compact = compactOf;
  const json = jsonResponse;
  const routes: string[] = [];
  const fetchFn = async (input: string) => {
    const url = new URL(input);
    const route = url.pathname.replace(/^.*\/api\//, "");
    routes.push(route);
    const node = url.searchParams.get("node") ?? "";
    if (route === "root") return json({ ...summary("DefaultModel", 1), order: DEPTH });
    if (route === "children") {
      const list = kids(node);
      return json({ node, total: list.length, offset: 0, compact: compact(list) });
    }
    if (route === "path_children") {
      const level = Number(/^Module\.d(\d+)\./.exec(node)![1]);
      const path = ["DefaultModel", ...Array.from({ length: level + 1 }, (_, i) => name(i))];
      const levels = path.slice(0, -1).map((n) => ({ node: n, total: 1, count: 1 }));
      return json({ path, levels, complete: true, compact: compact(path.slice(0, -1).flatMap(kids)) });
    }
    return new Response(JSON.stringify({ error: "no such route" }), { status: 404 });
  };

  beforeAll(() => {
    vi.stubGlobal("ResizeObserver", class { observe() {} disconnect() {} });
    vi.stubGlobal("requestAnimationFrame", (fn: FrameRequestCallback) => setTimeout(() => fn(0), 0));
    HTMLCanvasElement.prototype.getContext = (() => null) as never;
  });
  afterAll(() => vi.unstubAllGlobals());

  it("opens the whole path in one request and shows the node, its ancestors laid out once", async () => {
    const api = new ApiClient("http://tb/data/plugin/graph_ascend/", fetchFn as never);
    let layouts = 0;
    const host = paneHost(api, { onLayout: () => void layouts++ });
    const pane = new GraphPane("NPU", host, "minimap");
    await pane.load();
    routes.length = 0;
    layouts = 0;
    const path = ["DefaultModel", ...Array.from({ length: DEPTH }, (_, i) => name(i))];
    const found = await pane.revealPath(path);
    expect(found?.name).toBe(name(DEPTH - 1));
    expect(routes).toEqual(["path_children"]);      // (it was one /api/children per level, one after the other)
    expect(layouts).toBe(1);
    expect(pane.expandedNames().length).toBe(DEPTH);
    const shown = pane.shownNames();
    expect(shown[shown.length - 1]).toBe(name(DEPTH - 1));
    // opening it again, or a node on the way, asks nothing more
    expect((await pane.revealPath(path.slice(0, 100)))?.name).toBe(name(98));
    expect(routes).toEqual(["path_children"]);
    pane.dispose();
  });

  it("slices a compact list per level, the manual positions made relative", () => {
    const c: CompactChildren = { name: ["a", "b", "c", "d"], type: [0, 1, 0, 1], n_children: [1, 0, 2, 0],
      order: [4, 5, 6, 7], precision: [0, null, 1, 0.5], manual: [1, 3] };
    expect(sliceCompact(c, 2, 4)).toEqual({ name: ["c", "d"], type: [0, 1], n_children: [2, 0], order: [6, 7],
      precision: [1, 0.5], manual: [1] });
    expect(sliceCompact(c, 0, 1).manual).toBeUndefined();
    expect(FIRST_PAGE).toBeGreaterThan(0);
  });
});
