// One side's graph (debug "NPU" or "Bench"): its laid-out tree, what is expanded, the canvas it is drawn on, the
// camera, the minimap, and the mouse and keyboard. Children come on demand (childPages.ts); pan and zoom never
// re-lay-out.
import type { ApiClient, SideKey } from "../api/client";
import type { NodeSummary, Side } from "../api/types";
import type { LayoutEngine } from "../layout/engine";
import {
  absPos, collapse, expand, expandChain, hitTest, isShown, LEAF_H, LEAF_W, layoutContent, makeNode, shownNodes,
  type LayoutNode,
} from "../layout/tree";
import { Camera, focusView, type Rect } from "../render/camera";
import { drawTree, type Paint } from "../render/draw";
import { Minimap, minimapRect } from "../render/minimap";
import type { Theme } from "../render/colors";
import { t } from "../i18n";
import { ChildPages, FIRST_PAGE } from "./childPages";
import { el } from "./dom";
import { bindPaneInput } from "./paneInput";
import type { Colouring } from "./paint";

export interface PaneHost {
  api: ApiClient;
  engine: LayoutEngine;
  key(side: Side): SideKey;
  microStep(): number;
  theme(): Theme;
  colouring(side: Side): Colouring;
  selectedOn(side: Side): string | null;
  counterpartOn(side: Side): string | null;
  highlighted(side: Side): ReadonlySet<string>;
  onSelect(side: Side, node: LayoutNode): void;
  /** the user asked to expand or collapse a node (called at once, so the other side can load concurrently) */
  onToggle(side: Side, node: LayoutNode, expanded: boolean): void;
  /** the set of expanded nodes changed */
  onLayout(side: Side): void;
  /** the user moved or zoomed the view (called when the move ends) */
  onCamera(side: Side, view: [number, number, number]): void;
  onBusy(delta: number): void;
  onError(e: unknown): void;
}

/** Quiet time after the last layout change before the minimap is rebuilt. */
const MINIMAP_DELAY_MS = 120;

/** Room above the graph for the pane's title ("NPU", "Bench"), which was drawn over the root box. */
export const TITLE_ROOM = 28;

/** Safety cap for expand-to-depth: more expansions than this are left for the user to ask for. */
export const MAX_AUTO_EXPAND = 3000;

export class GraphPane {
  readonly el: HTMLElement;
  readonly canvas: HTMLCanvasElement;
  readonly minimap: Minimap;
  readonly camera = new Camera();
  root: LayoutNode | null = null;
  readonly byName = new Map<string, LayoutNode>();
  private readonly pages = new ChildPages(this);
  private dirty = false;
  private minimapDirty = false;
  /** where a wheel zoom is heading (animated over a few frames) */
  zoomTarget: { scale: number; sx: number; sy: number } | null = null;
  private width = 0;
  private height = 0;
  /** drawing statistics, read by the benchmark through window.__tbprobe.stats */
  lastDrawMs = 0;
  draws = 0;
  lastVisited = 0;

  constructor(readonly side: Side, readonly host: PaneHost, minimapTestId: string) {
    this.canvas = el("canvas", { class: "ga-canvas", tabindex: 0, "aria-label": `${side} graph` });
    this.minimap = new Minimap(minimapTestId, (wx, wy) => {
      this.camera.centerOn(wx, wy, this.width, this.height);
      this.requestDraw();
      this.cameraMoved();
    }, { hide: t("minimapHide"), show: t("minimapShow") });
    this.el = el("div", { class: "ga-pane", testid: `graph-pane-${side}` },
      el("div", { class: "ga-pane-title", text: side === "NPU" ? "NPU" : "Bench" }),
      this.canvas, this.minimap.el);
    this.minimap.toggle.addEventListener("click", () => this.requestDraw()); // (shown again: its rectangle)
    // (before any fit, e.g. when the root's children cannot be read: the root box starts below the title)
    this.camera.tx = 16;
    this.camera.ty = TITLE_ROOM;
    bindPaneInput(this);
    this.resizeObserver = new ResizeObserver(() => this.resize());
    this.resizeObserver.observe(this.el);
  }

  private resizeObserver: ResizeObserver;

  /** Forget this pane (another file, step or rank replaces it): stop observing and drop the tree. */
  dispose(): void {
    this.resizeObserver.disconnect();
    this.pages.reset();
    this.root = null;
    this.byName.clear();
    if (this.cameraTimer) clearTimeout(this.cameraTimer);
    if (this.minimapTimer) clearTimeout(this.minimapTimer);
  }

  private resize(): void {
    const r = this.canvas.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.width = r.width;
    this.height = r.height;
    this.minimap.fitPane(r.width, r.height);
    this.canvas.width = Math.max(1, Math.round(r.width * dpr));
    this.canvas.height = Math.max(1, Math.round(r.height * dpr));
    // A view asked for while the pane was hidden (another tab) is applied once it has a size.
    if (this.width > 0 && this.height > 0 && this.deferred) {
      const d = this.deferred;
      this.deferred = null;
      d();
    }
    this.requestDraw();
  }

  private deferred: (() => void) | null = null;

  private hidden(): boolean {
    const { w, h } = this.viewportSize();
    return w <= 0 || h <= 0;
  }

  viewportSize(): { w: number; h: number } {
    if (!this.width) {
      const r = this.canvas.getBoundingClientRect();
      this.width = r.width;
      this.height = r.height;
    }
    return { w: this.width, h: this.height };
  }

  /** Drop the tree and load the root of the current file/step/rank, with its children shown. */
  async load(): Promise<void> {
    const gen = this.pages.reset();
    this.byName.clear();
    this.root = null;
    this.requestDraw();
    const key = this.host.key(this.side);
    const summary = await this.host.api.root(key);
    if (gen !== this.pages.generation) return;
    const root = makeNode(summary, null, 0);
    this.root = root;
    this.byName.set(root.name, root);
    if (summary.partial) void this.pages.completeLater();
    await this.expandNode(root, false);
  }

  async expandNode(n: LayoutNode, notify = true): Promise<void> {
    if (n.expanded || n.summary.n_children === 0) return;
    if (notify) this.host.onToggle(this.side, n, true);
    const presized = await this.pages.ensure(n);
    if (!n.children || n.expanded) return;
    expand(n, presized);
    this.layoutChanged();
    this.host.onLayout(this.side);
  }

  collapseNode(n: LayoutNode, notify = true): void {
    if (!n.expanded) return;
    if (notify) this.host.onToggle(this.side, n, false);
    collapse(n);
    this.layoutChanged();
    this.host.onLayout(this.side);
  }

  async toggle(n: LayoutNode): Promise<void> {
    if (n.expanded) this.collapseNode(n);
    else await this.expandNode(n);
  }

  /** The child of `n` named `name` (the name map first: a linear search per level of a long list was slow). */
  private childNamed(n: LayoutNode, name: string): LayoutNode | undefined {
    const k = this.byName.get(name);
    if (k && k.parent === n) return k;
    return n.children?.find((c) => c.name === name);
  }

  /** childNamed, after the page of children being fetched for `n` (if any) has come in. */
  private async childOnceLoaded(n: LayoutNode, name: string): Promise<LayoutNode | undefined> {
    const found = this.childNamed(n, name);
    if (found || !this.pages.arriving(n)) return found;
    await this.pages.whenLoaded(n);
    return this.childNamed(n, name);
  }

  /**
   * Expand the ancestors in `path` (root first) so its last node is shown; returns that node if found.
   *
   * The children of every ancestor not open yet come in one request (/api/path_children) and the opened chain is
   * laid out once (expandChain): a path opened level by level cost one request after the other and a layout of
   * every ancestor per level, so a node 20,000 levels deep never showed (minutes of requests, quadratic layout).
   */
  async revealPath(path: string[]): Promise<LayoutNode | null> {
    const root = this.root;
    if (!root || !path.length) return null;
    if (path[0] !== root.name) return this.byName.get(path[path.length - 1]) ?? null;
    const gen = this.pages.generation;
    // down the part of the path shown already
    let n: LayoutNode = root;
    let i = 1;
    for (; i < path.length && n.expanded && n.children; i++) {
      const next = await this.childOnceLoaded(n, path[i]);
      if (!next) return null;
      n = next;
    }
    if (i === path.length) return n;
    if (path.length - i > 1) {
      // (a failure leaves the levels to the requests of pages.ensure below, which report their own errors)
      try {
        await this.host.api.prefetchPath(this.host.key(this.side), path[path.length - 1], this.host.microStep(),
          FIRST_PAGE);
      } catch {
        /* asked for level by level */
      }
      if (gen !== this.pages.generation) return null;
    }
    const chain: LayoutNode[] = [];
    let found: LayoutNode | null = null;
    try {
      for (; i < path.length; i++) {
        if (n.summary.n_children === 0) return null;
        if (!n.children) await this.pages.ensure(n);
        if (gen !== this.pages.generation || !n.children) return null;
        chain.push(n);
        const next = await this.childOnceLoaded(n, path[i]);
        if (!next) return null;
        n = next;
      }
      found = n;
    } finally {
      // what was opened stays open, the path found or not (as when each level was expanded on its way down)
      if (gen === this.pages.generation && chain.length) {
        expandChain(chain);
        this.layoutChanged();
        this.host.onLayout(this.side);
      }
    }
    return found;
  }

  /** Restore a list of expanded nodes (from the URL or the other pane); parents are expanded before children. */
  async expandNames(names: string[]): Promise<void> {
    const wanted = new Set(names);
    // Whether a node is shown, remembered for this call (isShown walks to the root: per name of a deep path that
    // was quadratic). Expansions only add shown nodes here, so a node found shown stays so.
    const shown = new Set<LayoutNode>();
    const isShownNow = (n: LayoutNode): boolean => {
      const seen: LayoutNode[] = [];
      let p: LayoutNode | null = n;
      let ok = true;
      for (; p && !shown.has(p); p = p.parent) {
        if (p.parent && !p.parent.expanded) {
          ok = false;
          break;
        }
        seen.push(p);
      }
      if (ok) for (const s of seen) shown.add(s);
      return ok;
    };
    let progress = true;
    while (progress && wanted.size) {
      progress = false;
      for (const name of [...wanted]) {
        const n = this.byName.get(name);
        if (n && isShownNow(n)) {
          wanted.delete(name);
          await this.expandNode(n, false);
          await this.pages.whenLoaded(n);
          progress = true;
        }
      }
    }
  }

  /** Expand every node down to `depth` levels (at most MAX_AUTO_EXPAND of them); returns whether it stopped
   * there with more to open. */
  async expandToDepth(depth: number): Promise<boolean> {
    if (!this.root) return false;
    const gen = this.pages.generation;
    // Every first page in one request (one per node, 6,000 and 63 s for two sides of a 5,000-child module);
    // without it (an older server) the expansions below ask for their own.
    try {
      await this.host.api.prefetchDepth(this.host.key(this.side), depth, this.host.microStep(), FIRST_PAGE,
        MAX_AUTO_EXPAND);
    } catch {
      /* asked for node by node */
    }
    if (gen !== this.pages.generation) return false;
    let frontier = [this.root];
    let count = 0;
    let capped = false;
    for (let d = 0; d < depth && frontier.length; d++) {
      const open = frontier.filter((n) => n.summary.n_children > 0);
      const todo = open.slice(0, MAX_AUTO_EXPAND - count);
      if (todo.length < open.length) capped = true;
      count += todo.length;
      // A few requests at a time: fast, without flooding the server.
      for (let i = 0; i < todo.length; i += 8) {
        await Promise.all(todo.slice(i, i + 8).map(async (n) => {
          await this.expandNode(n, false);
          await this.pages.whenLoaded(n);
        }));
      }
      frontier = todo.flatMap((n) => n.children ?? []);
      if (capped) break;
    }
    return capped;
  }

  /** Collapse everything below the root (the root stays open, as on first load). */
  collapseAll(): void {
    const root = this.root;
    if (!root) return;
    for (const n of this.byName.values()) {
      if (n !== root && n.expanded) {
        n.expanded = false;
        n.w = LEAF_W;
        n.h = LEAF_H;
      }
    }
    layoutContent(root, 0);
    this.layoutChanged();
  }

  /** Expanded nodes of the drawn tree, in pre-order; only expanded nodes are descended into. */
  expandedNames(): string[] {
    const out: string[] = [];
    const root = this.root;
    if (!root || !root.expanded) return out;
    const stack = [root];
    while (stack.length) {
      const n = stack.pop()!;
      out.push(n.name);
      const ch = n.children;
      if (!ch) continue;
      for (let i = ch.length - 1; i >= 0; i--) if (ch[i].expanded) stack.push(ch[i]);
    }
    return out;
  }

  /** Resolves when every child of n is known by name (after a paged load). */
  whenLoaded(n: LayoutNode): Promise<void> {
    return this.pages.whenLoaded(n);
  }

  /** Start loading a node's children into the client's cache (a likely next expand); draws nothing. */
  prefetchChildren(n: LayoutNode): void {
    this.pages.prefetch(n);
  }

  shownNames(): string[] {
    return this.root ? shownNodes(this.root).filter((n) => n.name).map((n) => n.name) : [];
  }

  /** Screen rectangle of a shown node relative to the document, or null when hidden or outside the pane. */
  nodeRect(name: string): { x: number; y: number; w: number; h: number } | null {
    const n = this.byName.get(name);
    if (!n || !isShown(n)) return null;
    const p = absPos(n);
    const s = this.camera.toScreen(p.x, p.y);
    const w = n.w * this.camera.scale;
    const h = n.h * this.camera.scale;
    const { w: vw, h: vh } = this.viewportSize();
    if (s.x > vw || s.y > vh || s.x + w < 0 || s.y + h < 0) return null;
    const r = this.canvas.getBoundingClientRect();
    return { x: r.left + s.x, y: r.top + s.y, w, h };
  }

  fit(): void {
    if (!this.root) return;
    if (this.hidden()) {
      this.deferred = () => this.fit();
      return;
    }
    const { w, h } = this.viewportSize();
    this.camera.fit(this.root.x, this.root.y, this.root.w, this.root.h, w, h, 16, 1.25, TITLE_ROOM);
    this.requestDraw();
    this.cameraMoved();
  }

  /** The view as [scale, world centre x, world centre y]: independent of the pane's size. */
  view(): [number, number, number] {
    const { w, h } = this.viewportSize();
    const c = this.camera.toWorld(w / 2, h / 2);
    return [this.camera.scale, c.x, c.y];
  }

  setView(v: [number, number, number]): void {
    if (this.hidden()) {
      this.deferred = () => this.setView(v);
      return;
    }
    const { w, h } = this.viewportSize();
    this.camera.scale = v[0];
    this.camera.centerOn(v[1], v[2], w, h);
    this.requestDraw();
  }

  private cameraTimer: ReturnType<typeof setTimeout> | null = null;

  cameraMoved(): void {
    if (this.cameraTimer) clearTimeout(this.cameraTimer);
    this.cameraTimer = setTimeout(() => this.host.onCamera(this.side, this.view()), 200);
  }

  /** Centre the view on a node, zooming in when it would be too small to read. */
  focus(n: LayoutNode): void {
    if (this.hidden()) {
      this.deferred = () => this.focus(n);
      return;
    }
    const p = absPos(n);
    const { w, h } = this.viewportSize();
    // its ancestors, outermost first: the widest that fits is shown whole, so the target's row is not cut off
    // (offsets summed root first, once: absPos per ancestor was quadratic on a chain 20,000 levels deep)
    const chain: LayoutNode[] = [];
    for (let a = n.parent; a; a = a.parent) chain.push(a);
    chain.reverse();
    const context: Rect[] = [];
    let ax = 0;
    let ay = 0;
    for (const a of chain) {
      ax += a.x;
      ay += a.y;
      context.push({ x: ax, y: ay, w: a.w, h: a.h });
    }
    const avoid = this.minimap.shownIn(w, h) ? minimapRect(w, h) : null;
    const v = focusView({ x: p.x, y: p.y, w: n.w, h: n.h }, context, this.camera.scale, w, h, TITLE_ROOM, avoid);
    this.camera.scale = v.scale;
    this.camera.tx = v.tx;
    this.camera.ty = v.ty;
    this.requestDraw();
    this.cameraMoved();
  }

  layoutChanged(): void {
    this.minimapDirty = true;
    this.requestDraw();
  }

  /** Colours changed (mode, legend, metric): redraw and rebuild the minimap. */
  repaint(): void {
    this.layoutChanged();
  }

  requestDraw(): void {
    if (this.dirty) return;
    this.dirty = true;
    requestAnimationFrame(() => this.frame());
  }

  private frame(): void {
    this.dirty = false;
    if (this.zoomTarget) {
      const z = this.zoomTarget;
      const next = this.camera.scale + (z.scale - this.camera.scale) * 0.35;
      const done = Math.abs(next - z.scale) / z.scale < 0.01;
      this.camera.zoomAt(z.sx, z.sy, (done ? z.scale : next) / this.camera.scale);
      if (done) {
        this.zoomTarget = null;
        this.cameraMoved();
      }
      else this.requestDraw();
    }
    this.draw();
  }

  draw(): void {
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    const t0 = performance.now();
    const { w, h } = this.viewportSize();
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const theme = this.host.theme();
    if (!this.root) {
      ctx.fillStyle = theme.background;
      ctx.fillRect(0, 0, w, h);
      return;
    }
    const colouring = this.host.colouring(this.side);
    const paint: Paint = {
      fill: colouring.fill, badge: colouring.badge, theme,
      selected: this.host.selectedOn(this.side), counterpart: this.host.counterpartOn(this.side),
      highlighted: this.host.highlighted(this.side),
    };
    const stats = drawTree(ctx, this.root, this.camera, w, h, paint);
    this.lastVisited = stats.visited;
    if (this.draws++ === 0) performance.mark?.(`tbprobe:first-draw-${this.side}`);
    if (this.minimapDirty) {
      this.minimapDirty = false;
      this.scheduleMinimap();
    }
    this.minimap.drawViewport(this.camera, w, h, theme);
    this.lastDrawMs = performance.now() - t0;
  }

  private minimapTimer: ReturnType<typeof setTimeout> | null = null;

  /**
   * Rebuild the minimap once the tree has settled, not in the frame that draws an expand: walking a 20k-children
   * list for the minimap cost more than drawing the view, and a long list changes again when its rest arrives.
   */
  private scheduleMinimap(): void {
    if (this.minimapTimer) clearTimeout(this.minimapTimer);
    this.minimapTimer = setTimeout(() => {
      this.minimapTimer = null;
      const root = this.root;
      if (!root) return;
      const theme = this.host.theme();
      void this.minimap.rebuild(root, this.host.colouring(this.side).fill, theme, this.host.engine)
        .then(() => this.minimap.drawViewport(this.camera, this.width, this.height, theme));
    }, MINIMAP_DELAY_MS);
  }

  /** The node under a mouse event, or null (a box still waiting for its summary is not clickable yet). */
  nodeAt(ev: MouseEvent): LayoutNode | null {
    if (!this.root) return null;
    const r = this.canvas.getBoundingClientRect();
    const w = this.camera.toWorld(ev.clientX - r.left, ev.clientY - r.top);
    const n = hitTest(this.root, w.x, w.y);
    return n && n.name ? n : null;
  }

  zoomBy(factor: number): void {
    const { w, h } = this.viewportSize();
    this.camera.zoomAt(w / 2, h / 2, factor);
    this.requestDraw();
    this.cameraMoved();
  }

  /** Replace the summaries of nodes changed by a manual match. */
  updateSummaries(changed: NodeSummary[]): void {
    for (const s of changed) {
      const n = this.byName.get(s.name);
      if (n) n.summary = s;
    }
    this.repaint();
  }
}
