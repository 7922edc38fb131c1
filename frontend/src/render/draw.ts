// Draws one pane's tree on a 2D canvas with levels of detail: far away, boxes only (batched by colour, one fill
// per colour); boxes big enough get an outline; labels only where they are legible. Only what intersects the
// viewport is visited (walkVisible), so a pan costs what is on screen, not what is laid out.
import { coveringNode, HEADER, walkVisible, type LayoutNode } from "../layout/tree";
import type { Camera } from "./camera";
import { mix, textOn, type Theme } from "./colors";

export interface Paint {
  /** fill of a node (legend, overflow or metric colour) */
  fill(n: LayoutNode): string;
  /** colour of the worst result inside a collapsed node, when worse than the node itself; null = none */
  badge(n: LayoutNode): string | null;
  selected: string | null;
  counterpart: string | null;
  highlighted: ReadonlySet<string>;
  theme: Theme;
}

export interface DrawStats {
  visited: number;
  labels: number;
}

const LABEL_MIN_PX = 9;

/**
 * "Module.layers.1.fc.Linear.forward.0" shortened to about `max` characters: first without the "Module." style
 * prefix every name shares, then in the middle, keeping both ends (the layer and the call index).
 */
const PREFIX = /^(Module|Functional|Tensor|Torch|Distributed|Aten|NPU)\./;

export function shorten(name: string, max: number): string {
  if (name.length <= max) return name;
  const bare = name.replace(PREFIX, "");
  if (bare !== name) return shorten(bare, max);
  if (max <= 1) return "…";
  const head = Math.ceil((max - 1) / 2);
  const tail = max - 1 - head;
  return name.slice(0, head) + "…" + (tail > 0 ? name.slice(name.length - tail) : "");
}

/**
 * A label's text in about `fits` characters (what its box holds). `siblingMax`: the longest name among the node's
 * siblings: when that one would not fit, the type prefix goes from this label too, so siblings are shortened
 * alike (a name that just fitted kept "Module." while its neighbours lost it).
 */
export function labelText(text: string, fits: number, siblingMax: number): string {
  const bare = siblingMax > fits ? text.replace(PREFIX, "") : text;
  return bare.length <= fits ? bare : shorten(bare, Math.max(1, Math.floor(fits) - 1));
}

export function drawTree(ctx: CanvasRenderingContext2D, root: LayoutNode, cam: Camera, vw: number, vh: number,
  paint: Paint): DrawStats {
  const th = paint.theme;
  ctx.fillStyle = th.background;
  ctx.fillRect(0, 0, vw, vh);
  const s = cam.scale;
  const tl = cam.toWorld(0, 0);
  // Fills are batched per colour within each depth and drawn shallow to deep, so an expanded parent's tint never
  // covers its children (siblings at one depth never overlap).
  const fills: Map<string, number[]>[] = [];
  const outline: number[] = [];
  const labels: { n: LayoutNode; x: number; y: number; w: number; h: number; fill: string; header: boolean }[] = [];
  const badges: { x: number; y: number; w: number; h: number; c: string }[] = [];
  const marks: { x: number; y: number; w: number; h: number; c: string; lw: number }[] = [];
  const push = (depth: number, color: string, x: number, y: number, w: number, h: number) => {
    const layer = fills[depth] ?? (fills[depth] = new Map());
    let a = layer.get(color);
    if (!a) layer.set(color, (a = []));
    const k = a.length - 4;
    // Zoomed out, neighbours in a row with the same colour merge into one rectangle (the gap between them is
    // under a pixel): far fewer path operations for the 20k-box case.
    if (k >= 0 && a[k + 1] === y && a[k + 3] === h && x - (a[k] + a[k + 2]) < 1.5 && x >= a[k]) {
      a[k + 2] = x + w - a[k];
      return;
    }
    a.push(x, y, w, h);
  };
  let visited = 0;
  // (from the deepest box holding the whole view: what is above it is hidden under it)
  const start = coveringNode(root, tl.x, tl.y, vw / s, vh / s);
  walkVisible(root, tl.x, tl.y, vw / s, vh / s, (n, ax, ay) => {
    visited++;
    const x = ax * s + cam.tx;
    const y = ay * s + cam.ty;
    const w = n.w * s;
    const h = n.h * s;
    const fill = paint.fill(n);
    if (n.expanded && n.children && n.children.length) {
      const hh = Math.min(h, HEADER * s);
      push(n.depth, mix(fill, th.background, th.dark ? 0.8 : 0.7), x, y, w, h);
      push(n.depth, fill, x, y, w, hh);
      if (w >= 4 && h >= 4) outline.push(x, y, w, h);
      // (only a header strip on screen: every ancestor of a deep node in view is visited, 20,000 of them)
      if (hh >= LABEL_MIN_PX + 2 && y + hh >= 0 && y <= vh) labels.push({ n, x, y, w, h: hh, fill, header: true });
    } else {
      push(n.depth, fill, x, y, Math.max(w, 0.6), Math.max(h, 0.6));
      if (w >= 4 && h >= 4) outline.push(x, y, w, h);
      if (h >= LABEL_MIN_PX + 2 && w >= 24) labels.push({ n, x, y, w, h, fill, header: false });
      const b = paint.badge(n);
      if (b && w >= 6) badges.push({ x: x + w - Math.max(3, w * 0.06), y, w: Math.max(3, w * 0.06), h, c: b });
    }
    if (n.name === paint.selected) marks.push({ x, y, w, h, c: th.selection, lw: 3 });
    else if (n.name === paint.counterpart) marks.push({ x, y, w, h, c: th.counterpart, lw: 3 });
    else if (paint.highlighted.has(n.name)) marks.push({ x, y, w, h, c: th.highlight, lw: 2 });
    // Children smaller than a pixel or so add nothing visible: the parent's tint stands for them.
    return h >= 3;
  }, start);
  for (const layer of fills) {
    if (!layer) continue;
    for (const [color, a] of layer) {
      ctx.fillStyle = color;
      ctx.beginPath();
      for (let i = 0; i < a.length; i += 4) ctx.rect(a[i], a[i + 1], a[i + 2], a[i + 3]);
      ctx.fill();
    }
  }
  if (outline.length) {
    ctx.strokeStyle = th.stroke;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let i = 0; i < outline.length; i += 4) {
      ctx.rect(Math.round(outline[i]) + 0.5, Math.round(outline[i + 1]) + 0.5, outline[i + 2], outline[i + 3]);
    }
    ctx.stroke();
  }
  for (const b of badges) {
    ctx.fillStyle = b.c;
    ctx.fillRect(b.x, b.y, b.w, b.h);
  }
  // the longest name among each parent's children (once per parent per frame: a 20k-children list costs ~0.1 ms)
  const longest = new Map<LayoutNode | null, number>();
  const siblingMax = (n: LayoutNode): number => {
    let m = longest.get(n.parent);
    if (m === undefined) {
      m = n.name.length;
      for (const k of n.parent?.children ?? []) if (k.name.length > m) m = k.name.length;
      longest.set(n.parent, m);
    }
    return m;
  };
  for (const l of labels) {
    const fontPx = Math.min(13, Math.max(8, l.h * 0.5));
    ctx.font = `${fontPx}px system-ui, "Noto Sans CJK SC", sans-serif`;
    ctx.textBaseline = "middle";
    ctx.fillStyle = textOn(l.fill);
    const avail = l.w - 8 - (l.header ? 0 : Math.max(3, l.w * 0.06));
    let text = l.n.name;
    if (l.header && l.n.children) text += `  (${l.n.children.length})`;
    // One measurement per label (only legible labels get here, so at most a few hundred per frame).
    const full = ctx.measureText(text).width;
    // (in characters of this label's average width; a header's count suffix aside for its siblings)
    const fits = full > 0 ? (text.length * avail) / full : Infinity;
    const suffix = text.length - l.n.name.length;
    text = labelText(text, fits, siblingMax(l.n) + suffix);
    ctx.fillText(text, l.x + 4, l.y + l.h / 2, Math.max(4, avail));
  }
  for (const m of marks) {
    ctx.strokeStyle = m.c;
    ctx.lineWidth = m.lw;
    ctx.strokeRect(m.x - 1, m.y - 1, m.w + 2, m.h + 2);
  }
  return { visited, labels: labels.length };
}
