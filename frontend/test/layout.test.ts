import { describe, expect, it } from "vitest";
import {
  absPos, collapse, columnsFor, expand, gridPositions, GAP, HEADER, layoutContent, LEAF_H, LEAF_W, makeNode,
  setChildren, shownNodes, walkVisible, type LayoutNode,
} from "../src/layout/tree";
import { summary } from "./helpers";

/** root with `n` children; child i has 3 children of its own */
function tree(n: number): LayoutNode {
  const root = makeNode(summary("root", n), null, 0);
  setChildren(root, Array.from({ length: n }, (_, i) => summary(`c${i}`, 3)));
  expand(root);
  return root;
}

function open(n: LayoutNode): void {
  setChildren(n, [0, 1, 2].map((i) => summary(`${n.name}.k${i}`)));
  expand(n);
}

function positions(root: LayoutNode): Map<string, string> {
  const m = new Map<string, string>();
  for (const n of shownNodes(root)) {
    const p = absPos(n);
    m.set(n.name, `${p.x},${p.y},${n.w},${n.h}`);
  }
  return m;
}

describe("incremental nested-box layout", () => {
  it("places a short list of children in one column, in execution order", () => {
    const root = tree(4);
    const ys = root.children!.map((c) => c.y);
    expect(ys).toEqual([HEADER, HEADER + LEAF_H + GAP, HEADER + 2 * (LEAF_H + GAP), HEADER + 3 * (LEAF_H + GAP)]);
    expect(new Set(root.children!.map((c) => c.x)).size).toBe(1);
  });

  it("expanding a node shifts the siblings after it and leaves those before it alone", () => {
    const root = tree(5);
    const before = root.children!.map((c) => ({ x: c.x, y: c.y }));
    const h0 = root.h;
    const target = root.children![2];
    open(target);
    const delta = target.h - LEAF_H;
    expect(delta).toBeGreaterThan(0);
    root.children!.forEach((c, i) => {
      if (i <= 2) expect({ x: c.x, y: c.y }).toEqual(before[i]);
      else expect(c.y).toBe(before[i].y + delta);
    });
    expect(root.h).toBe(h0 + delta);
    // the expanded node's children sit inside it, below its header
    for (const k of target.children!) {
      expect(k.y).toBeGreaterThanOrEqual(HEADER);
      expect(k.y + k.h).toBeLessThanOrEqual(target.h);
    }
  });

  it("collapse restores exactly the positions before the expand (grid rows too)", () => {
    for (const n of [5, 30, 200]) {
      const root = tree(n);
      const before = positions(root);
      const mid = root.children![Math.floor(n / 2)];
      open(mid);
      open(root.children![n - 1]);
      collapse(root.children![n - 1]);
      collapse(mid);
      expect(positions(root)).toEqual(before);
    }
  });

  it("an expanded child takes a row of its own inside a grid", () => {
    const root = tree(30);
    const cols = columnsFor(30);
    expect(cols).toBeGreaterThan(1);
    const target = root.children![cols + 1]; // second box of the second row
    open(target);
    expect(target.x).toBeLessThan(LEAF_W); // first column
    const prev = root.children![cols];
    const next = root.children![cols + 2];
    expect(prev.y).toBeLessThan(target.y);
    expect(next.y).toBe(target.y + target.h + GAP);
    expect(root.w).toBeGreaterThanOrEqual(target.w);
  });

  it("nested expansion propagates sizes to every ancestor", () => {
    const root = tree(3);
    const a = root.children![0];
    open(a);
    const h1 = root.h;
    const inner = a.children![1];
    inner.summary = summary(inner.name, 2);
    setChildren(inner, [summary("x"), summary("y")]);
    expand(inner);
    expect(root.h).toBe(h1 + (inner.h - LEAF_H));
    expect(root.children![1].y).toBe(a.y + a.h + GAP);
  });

  it("the worker's grid matches the main-thread layout", () => {
    for (const n of [1, 6, 7, 100, 5000]) {
      const g = gridPositions(n);
      const p = makeNode(summary("p", n), null, 0);
      setChildren(p, Array.from({ length: n }, (_, i) => summary(`k${i}`)));
      p.expanded = true;
      layoutContent(p);
      expect(g.w).toBe(p.w);
      expect(g.h).toBe(p.h);
      p.children!.forEach((c, i) => {
        expect(g.xy[2 * i]).toBe(c.x);
        expect(g.xy[2 * i + 1]).toBe(c.y);
      });
    }
  });

  it("a presized expand (from the worker) gives the same layout as a local one", () => {
    const a = makeNode(summary("a", 50), null, 0);
    const g = gridPositions(50);
    setChildren(a, Array.from({ length: 50 }, (_, i) => summary(`k${i}`)), g.xy);
    expand(a, { w: g.w, h: g.h });
    const b = makeNode(summary("a", 50), null, 0);
    setChildren(b, Array.from({ length: 50 }, (_, i) => summary(`k${i}`)));
    expand(b);
    expect(positions(a)).toEqual(positions(b));
  });

  it("walkVisible visits only what intersects the viewport (culling)", () => {
    const root = tree(20000);
    const all = shownNodes(root).length;
    expect(all).toBe(20001);
    let visited = 0;
    walkVisible(root, 0, 0, 800, 600, () => {
      visited++;
    });
    expect(visited).toBeGreaterThan(10);
    expect(visited).toBeLessThan(400);
    // every visited node really intersects the rectangle
    walkVisible(root, 1000, 2000, 500, 300, (n, x, y) => {
      expect(x <= 1500 && y <= 2300 && x + n.w >= 1000 && y + n.h >= 2000).toBe(true);
    });
  });
});
