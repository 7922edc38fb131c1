// Incremental nested-box layout of the visible tree.
//
// Written here rather than taken from d3-hierarchy or elkjs: those lay out a whole tree at once (elk in a
// multi-megabyte worker), while this view needs the opposite, an *incremental* layout where expanding one node
// lays out only its children and then shifts what follows it. Nested boxes with rows make that cheap: every node
// stores its position relative to its parent, so an expand touches the expanded node's children and the siblings
// after it on the path to the root, nothing else. Drawing and hit testing add the offsets while walking down.
//
// An expanded node is a header bar plus its children in execution order: collapsed children flow in rows of
// `columnsFor(n)` boxes, an expanded child takes a row of its own. Rows never overlap, so within one parent the
// children's top (y) and bottom (y + h) are both non-decreasing: binary search finds what is in view.
import type { NodeSummary } from "../api/types";

export const LEAF_W = 220;
export const LEAF_H = 26;
export const GAP = 6;
export const PAD = 8;
export const HEADER = 24;

export interface LayoutNode {
  name: string;
  summary: NodeSummary;
  parent: LayoutNode | null;
  /** null until loaded from the server */
  children: LayoutNode[] | null;
  expanded: boolean;
  /** index in parent.children */
  index: number;
  depth: number;
  /** position relative to the parent's top-left corner, and size; all in world units (CSS px at zoom 1) */
  x: number;
  y: number;
  w: number;
  h: number;
}

export function makeNode(summary: NodeSummary, parent: LayoutNode | null, index: number): LayoutNode {
  return {
    name: summary.name, summary, parent, children: null, expanded: false, index,
    depth: parent ? parent.depth + 1 : 0, x: 0, y: 0, w: LEAF_W, h: LEAF_H,
  };
}

/** How many collapsed boxes go in a row: one column for short lists (reads top-down), about square for long ones. */
export function columnsFor(n: number): number {
  if (n <= 6) return 1;
  return Math.max(2, Math.min(40, Math.round(Math.sqrt(n / 2))));
}

/** Positions of n collapsed children laid out from scratch (the worker runs this for very long child lists). */
export function gridPositions(n: number): { xy: Float64Array; w: number; h: number } {
  const cols = columnsFor(n);
  const xy = new Float64Array(n * 2);
  for (let i = 0; i < n; i++) {
    xy[2 * i] = PAD + (i % cols) * (LEAF_W + GAP);
    xy[2 * i + 1] = HEADER + Math.floor(i / cols) * (LEAF_H + GAP);
  }
  const rows = Math.ceil(n / cols);
  const usedCols = Math.min(cols, n);
  const w = Math.max(LEAF_W, 2 * PAD + usedCols * (LEAF_W + GAP) - GAP);
  const h = n ? HEADER + rows * (LEAF_H + GAP) - GAP + PAD : LEAF_H;
  return { xy, w, h };
}

/**
 * Re-place node's children from the row holding child `from` onwards; children before that row keep their
 * positions. Updates node.w and node.h.
 */
export function layoutContent(node: LayoutNode, from = 0): void {
  const ch = node.children;
  if (!node.expanded || !ch || ch.length === 0) {
    node.w = LEAF_W;
    node.h = LEAF_H;
    if (node.expanded) node.h = HEADER + PAD;
    return;
  }
  const cols = columnsFor(ch.length);
  let s = Math.max(0, Math.min(from, ch.length - 1));
  // Back to the start of the previous row: a child that collapsed may now join the row before it.
  while (s > 0 && ch[s - 1].y === ch[s].y) s--;
  if (s > 0) {
    s--;
    while (s > 0 && ch[s - 1].y === ch[s].y) s--;
  }
  let y = s === 0 ? HEADER : ch[s].y;
  let col = 0;
  let rowH = 0;
  for (let i = s; i < ch.length; i++) {
    const c = ch[i];
    if (c.expanded) {
      if (col > 0) {
        y += rowH + GAP;
        col = 0;
        rowH = 0;
      }
      c.x = PAD;
      c.y = y;
      y += c.h + GAP;
    } else {
      if (col === cols) {
        y += rowH + GAP;
        col = 0;
        rowH = 0;
      }
      c.x = PAD + col * (LEAF_W + GAP);
      c.y = y;
      rowH = Math.max(rowH, c.h);
      col++;
    }
  }
  if (col > 0) y += rowH + GAP;
  let maxW = LEAF_W;
  for (const c of ch) maxW = Math.max(maxW, c.x + c.w + PAD);
  node.w = maxW;
  node.h = y - GAP + PAD;
}

/** After `node` changed size, shift what follows it in each ancestor, up to the root. */
export function propagate(node: LayoutNode): void {
  let c = node;
  while (c.parent) {
    layoutContent(c.parent, c.index);
    c = c.parent;
  }
}

/** Attach freshly loaded children (collapsed) to node. */
export function setChildren(node: LayoutNode, summaries: NodeSummary[], xy?: Float64Array): LayoutNode[] {
  const kids = summaries.map((s, i) => makeNode(s, node, i));
  if (xy && xy.length === kids.length * 2) {
    for (let i = 0; i < kids.length; i++) {
      kids[i].x = xy[2 * i];
      kids[i].y = xy[2 * i + 1];
    }
  }
  node.children = kids;
  return kids;
}

/** Expand a node whose children are loaded; `presized` = the worker already placed them (all collapsed). */
export function expand(node: LayoutNode, presized?: { w: number; h: number }): void {
  if (!node.children) throw new Error(`children of ${node.name} are not loaded`);
  node.expanded = true;
  if (presized && node.children.every((c) => !c.expanded)) {
    node.w = presized.w;
    node.h = presized.h;
  } else {
    layoutContent(node, 0);
  }
  propagate(node);
}

/**
 * Expand a chain of nodes at once (each the parent of the next, every one's children loaded): the path opened to
 * reveal a deep node. Each node is laid out once, deepest first, then what follows the first one in its ancestors:
 * expanding them one by one laid out every ancestor again each time, quadratic in the depth (20,000 levels: 2e8
 * layouts). Nodes of the chain expanded already are laid out again too (their child below changed).
 */
export function expandChain(chain: LayoutNode[]): void {
  if (!chain.length) return;
  for (const n of chain) {
    if (!n.children) throw new Error(`children of ${n.name} are not loaded`);
    n.expanded = true;
  }
  for (let i = chain.length - 1; i >= 0; i--) layoutContent(chain[i], 0);
  propagate(chain[0]);
}

export function collapse(node: LayoutNode): void {
  node.expanded = false;
  node.w = LEAF_W;
  node.h = LEAF_H;
  propagate(node);
}

/** Absolute top-left of a node: the sum of the offsets on its path. */
export function absPos(node: LayoutNode): { x: number; y: number } {
  let x = 0;
  let y = 0;
  for (let n: LayoutNode | null = node; n; n = n.parent) {
    x += n.x;
    y += n.y;
  }
  return { x, y };
}

/** True when every ancestor is expanded (the node is part of the drawn tree). */
export function isShown(node: LayoutNode): boolean {
  for (let p = node.parent; p; p = p.parent) if (!p.expanded) return false;
  return true;
}

/** First index i with ch[i].y + ch[i].h >= top (bottoms are non-decreasing). */
export function firstBottomAtLeast(ch: LayoutNode[], top: number): number {
  let lo = 0;
  let hi = ch.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ch[mid].y + ch[mid].h < top) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export interface Visit {
  (node: LayoutNode, ax: number, ay: number): boolean | void;
}

/**
 * Walk the drawn tree inside a world rectangle, parents before children (pre-order). The callback gets absolute
 * positions and returns false to skip a node's children (too small to see). Cost: what is in the rectangle plus a
 * log per level. With a stack of its own, not recursion: a graph 20,000 levels deep overflowed the call stack
 * ("Maximum call stack size exceeded" on every frame).
 */
export function walkVisible(root: LayoutNode, rx: number, ry: number, rw: number, rh: number, fn: Visit,
  start: { node: LayoutNode; ax: number; ay: number } = { node: root, ax: root.x, ay: root.y }): void {
  const nodes: LayoutNode[] = [start.node];
  const xs: number[] = [start.ax];
  const ys: number[] = [start.ay];
  const kids: LayoutNode[] = [];
  while (nodes.length) {
    const n = nodes.pop()!;
    const ax = xs.pop()!;
    const ay = ys.pop()!;
    if (ax > rx + rw || ay > ry + rh || ax + n.w < rx || ay + n.h < ry) continue;
    if (fn(n, ax, ay) === false) continue;
    const ch = n.children;
    if (!n.expanded || !ch) continue;
    const top = ry - ay;
    const bottom = ry + rh - ay;
    kids.length = 0;
    for (let i = firstBottomAtLeast(ch, top); i < ch.length; i++) {
      const c = ch[i];
      if (c.y > bottom) break;
      kids.push(c);
    }
    // (pushed last first, so the first child is visited next: the order of the recursive walk)
    for (let i = kids.length - 1; i >= 0; i--) {
      const c = kids[i];
      nodes.push(c);
      xs.push(ax + c.x);
      ys.push(ay + c.y);
    }
  }
}

/**
 * The deepest drawn node whose box holds the whole world rectangle, with its absolute position (the root when
 * none does). Zoomed in on a deep node, every ancestor holds the view: a drawing can start there, each
 * ancestor's box being hidden under it (20,000 of them were drawn on every frame).
 */
export function coveringNode(root: LayoutNode, rx: number, ry: number, rw: number, rh: number):
  { node: LayoutNode; ax: number; ay: number } {
  let n = root;
  let ax = root.x;
  let ay = root.y;
  for (;;) {
    const ch = n.children;
    if (!n.expanded || !ch || !ch.length) break;
    let found: LayoutNode | null = null;
    for (let i = firstBottomAtLeast(ch, ry + rh - ay); i < ch.length; i++) {
      const c = ch[i];
      if (c.y > ry - ay) break;
      if (ax + c.x <= rx && ay + c.y <= ry && ax + c.x + c.w >= rx + rw && ay + c.y + c.h >= ry + rh) {
        found = c;
        break;
      }
    }
    if (!found) break;
    ax += found.x;
    ay += found.y;
    n = found;
  }
  return { node: n, ax, ay };
}

/** The deepest drawn node under a world point, or null. */
export function hitTest(root: LayoutNode, wx: number, wy: number): LayoutNode | null {
  let n: LayoutNode = root;
  let ax = root.x;
  let ay = root.y;
  if (wx < ax || wy < ay || wx > ax + n.w || wy > ay + n.h) return null;
  for (;;) {
    const ch = n.children;
    if (!n.expanded || !ch || !ch.length) return n;
    const ly = wy - ay;
    const lx = wx - ax;
    let found: LayoutNode | null = null;
    for (let i = firstBottomAtLeast(ch, ly); i < ch.length; i++) {
      const c = ch[i];
      if (c.y > ly) break;
      if (lx >= c.x && lx <= c.x + c.w && ly >= c.y && ly <= c.y + c.h) {
        found = c;
        break;
      }
    }
    if (!found) return n;
    ax += found.x;
    ay += found.y;
    n = found;
  }
}

/** Every node of the drawn tree, in pre-order. */
export function shownNodes(root: LayoutNode): LayoutNode[] {
  const out: LayoutNode[] = [];
  const stack = [root];
  while (stack.length) {
    const n = stack.pop()!;
    out.push(n);
    if (n.expanded && n.children) for (let i = n.children.length - 1; i >= 0; i--) stack.push(n.children[i]);
  }
  return out;
}
