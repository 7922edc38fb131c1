// window.__tbprobe: what the end-to-end tests read, since the graph is pixels on a canvas (see README.md).
import type { Side } from "../api/types";
import type { GraphPane } from "./graphPane";

export interface TestHooks {
  readonly ready: boolean;
  visibleNodes(side: Side): string[];
  nodeRect(side: Side, name: string): { x: number; y: number; w: number; h: number } | null;
  selected(): string | null;
  expanded(side: Side): string[];
  /** not in the e2e contract: drawing statistics for the benchmark */
  stats(side: Side): { draws: number; lastDrawMs: number; visited: number; worker: boolean } | null;
}

declare global {
  interface Window {
    __tbprobe?: TestHooks;
  }
}

export interface HookSource {
  ready(): boolean;
  pane(side: Side): GraphPane | undefined;
  selected(): string | null;
  usesWorker(): boolean;
}

export function installHooks(src: HookSource): void {
  window.__tbprobe = {
    get ready() {
      return src.ready();
    },
    visibleNodes: (side) => src.pane(side)?.shownNames() ?? [],
    nodeRect: (side, name) => src.pane(side)?.nodeRect(name) ?? null,
    selected: () => src.selected(),
    expanded: (side) => src.pane(side)?.expandedNames() ?? [],
    stats: (side) => {
      const p = src.pane(side);
      return p ? { draws: p.draws, lastDrawMs: p.lastDrawMs, visited: p.lastVisited, worker: src.usesWorker() } : null;
    },
  };
}
