import type { ApiClient } from "../src/api/client";
import type { CompactChildren, NodeSummary, Side } from "../src/api/types";
import { LIGHT } from "../src/render/colors";
import type { PaneHost } from "../src/views/graphPane";

export function summary(name: string, n_children = 0, extra: Partial<NodeSummary> = {}): NodeSummary {
  return {
    name, type: n_children ? 0 : 1, n_children, precision: 0, overflow: null, subtree_precision: null,
    subtree_overflow: null, matched: true, micro_step: 0, order: 0, ...extra,
  };
}

/** The compact form of a child list (/api/children?compact=1), every field given. */
export function compactOf(list: NodeSummary[]): CompactChildren {
  return {
    name: list.map((s) => s.name), type: list.map((s) => s.type), n_children: list.map((s) => s.n_children),
    order: list.map((s) => s.order),
  };
}

export function jsonResponse(body: unknown): Response {
  return new Response(JSON.stringify(body), { status: 200 });
}

/** A GraphPane's host over `api`, with a layout engine that places nothing and no-op callbacks (`extra` replaces). */
export function paneHost(api: ApiClient, extra: Partial<PaneHost> = {}): PaneHost {
  return {
    api, engine: { grid: async (n: number) => ({ xy: new Float64Array(2 * n), w: 220, h: 26 }) } as never,
    key: (side: Side) => ({ run: "r", file: "f.vis.db", step: 0, rank: 0, side }), microStep: () => -1,
    theme: () => LIGHT, colouring: () => ({ fill: () => "#FFFCF3", badge: () => null }) as never,
    selectedOn: () => null, counterpartOn: () => null, highlighted: () => new Set(), onSelect: () => undefined,
    onToggle: () => undefined, onLayout: () => undefined, onCamera: () => undefined, onBusy: () => undefined,
    onError: (e) => { throw e; },
    ...extra,
  };
}
