// How one pane's children come from the server: /api/children, only for the node being expanded, a long list in
// pages (the first drawn at once, the rest filling boxes already laid out), and again when the server answered
// before its index of the graph was ready. The pane (graphPane.ts) decides what is expanded and draws it.
import type { ChildrenResponse, NodeSummary, Side } from "../api/types";
import { setChildren, type LayoutNode } from "../layout/tree";
import type { PaneHost } from "./graphPane";

/** Children drawn from the first response; the rest of a long list follows in pages of MAX_PAGE. */
export const FIRST_PAGE = 2000;
const MAX_PAGE = 50000;

/** A box standing for a child whose summary has not arrived yet (the empty name marks it). */
function placeholder(order: number): NodeSummary {
  return { name: "", type: 1, n_children: 0, precision: null, overflow: null, subtree_precision: null,
    subtree_overflow: null, matched: true, micro_step: 0, order };
}

/** What the pages fill in: the pane's tree and its name map, repainted as pages arrive. */
export interface PagedTree {
  readonly side: Side;
  readonly host: PaneHost;
  readonly byName: Map<string, LayoutNode>;
  readonly root: LayoutNode | null;
  repaint(): void;
}

export class ChildPages {
  /** bumped for each new tree (another file, step or rank): answers for an older one are dropped */
  generation = 0;
  /** nodes whose long child list is still arriving */
  private pending = new Map<LayoutNode, Promise<void>>();
  private completing = false;

  constructor(private readonly tree: PagedTree) {}

  /** A new tree: forget what is arriving for the old one. Returns the new generation. */
  reset(): number {
    this.pending.clear();
    return ++this.generation;
  }

  /** Whether part of n's child list is still arriving. */
  arriving(n: LayoutNode): boolean {
    return this.pending.has(n);
  }

  /** Resolves when every child of n is known by name (after a paged load). */
  async whenLoaded(n: LayoutNode): Promise<void> {
    await this.pending.get(n);
  }

  /**
   * Load a node's children. A long list comes in two steps: the first page is drawn at once, in boxes laid out
   * for the whole list (the layout needs only the count), and the rest fill those boxes when they arrive.
   * Returns the size of the laid-out grid, or undefined when nothing was loaded.
   */
  async ensure(n: LayoutNode): Promise<{ w: number; h: number } | undefined> {
    if (n.children) return undefined;
    const { host, side, byName } = this.tree;
    const gen = this.generation;
    const key = host.key(side);
    const ms = host.microStep();
    host.onBusy(1);
    try {
      const api = host.api;
      const firstReq = api.childrenCompact(key, n.name, ms, 0, FIRST_PAGE);
      // A long list: the rest is asked for at once, beside the first page, not after it (one round trip less).
      const restReq = n.summary.n_children > FIRST_PAGE ? api.childrenCompact(key, n.name, ms, FIRST_PAGE, MAX_PAGE)
        : null;
      restReq?.catch(() => undefined); // reported by loadRest when it is awaited
      const first = await firstReq;
      if (first.partial) void this.completeLater();
      performance.mark?.(`tbprobe:children-${side}`);
      if (gen !== this.generation || n.children) return undefined;
      const total = Math.max(first.total, first.children.length);
      const summaries = first.children.slice();
      for (let i = summaries.length; i < total; i++) summaries.push(placeholder(i));
      const grid = await host.engine.grid(total);
      performance.mark?.(`tbprobe:grid-${side}`);
      if (gen !== this.generation || n.children) return undefined;
      for (const k of setChildren(n, summaries, grid.xy)) if (k.name) byName.set(k.name, k);
      if (first.children.length < total) {
        const early = first.children.length === FIRST_PAGE ? restReq : null;
        this.pending.set(n, this.loadRest(n, first.children.length, gen, early));
      }
      return { w: grid.w, h: grid.h };
    } finally {
      host.onBusy(-1);
    }
  }

  private async loadRest(n: LayoutNode, from: number, gen: number,
    early: Promise<ChildrenResponse> | null = null): Promise<void> {
    const { host, side, byName } = this.tree;
    const key = host.key(side);
    host.onBusy(1);
    try {
      let offset = from;
      const kids = n.children!;
      while (offset < kids.length && gen === this.generation) {
        const page = await (offset === from && early ? early
          : host.api.childrenCompact(key, n.name, host.microStep(), offset, MAX_PAGE));
        if (gen !== this.generation || !page.children.length) break;
        page.children.forEach((s, i) => {
          const k = kids[offset + i];
          if (!k) return;
          k.summary = s;
          k.name = s.name;
          byName.set(s.name, k);
        });
        offset += page.children.length;
        this.tree.repaint();
      }
    } catch (e) {
      host.onError(e);
    } finally {
      this.pending.delete(n);
      host.onBusy(-1);
    }
  }

  /**
   * The server answered the first view before its index of the graph was ready (a big file opened for the first
   * time): the summaries lack the subtree roll-ups. Ask again, a little later each time, until the answers are
   * complete, then replace the summaries of everything loaded. The page is not `ready` until then.
   */
  async completeLater(): Promise<void> {
    if (this.completing) return;
    this.completing = true;
    const { host, side, byName } = this.tree;
    const gen = this.generation;
    host.onBusy(1);
    try {
      for (let tries = 0; tries < 120 && gen === this.generation; tries++) {
        await new Promise((r) => setTimeout(r, Math.min(400, 100 + 50 * tries)));
        if (gen !== this.generation) return;
        const key = host.key(side);
        const root = await host.api.root(key);
        if (root.partial) continue;
        const mine = this.tree.root;
        if (gen !== this.generation || !mine) return;
        if (mine.name === root.name) mine.summary = root;
        for (const n of [...byName.values()]) {
          if (!n.children) continue;
          let offset = 0;
          for (;;) {
            const page = await host.api.childrenCompact(key, n.name, host.microStep(), offset, MAX_PAGE);
            if (gen !== this.generation) return;
            for (const s of page.children) {
              const k = byName.get(s.name);
              if (k) k.summary = s;
            }
            offset += page.children.length;
            if (!page.children.length || offset >= page.total) break;
          }
        }
        this.tree.repaint();
        return;
      }
    } catch (e) {
      host.onError(e);
    } finally {
      this.completing = false;
      host.onBusy(-1);
    }
  }

  /** Start loading a node's children into the client's cache (a likely next expand); draws nothing. */
  prefetch(n: LayoutNode): void {
    if (n.children || n.summary.n_children === 0) return;
    const { host, side } = this.tree;
    const key = host.key(side);
    const ms = host.microStep();
    host.api.childrenCompact(key, n.name, ms, 0, FIRST_PAGE).catch(() => undefined);
    if (n.summary.n_children > FIRST_PAGE) {
      host.api.childrenCompact(key, n.name, ms, FIRST_PAGE, MAX_PAGE).catch(() => undefined);
    }
  }
}
