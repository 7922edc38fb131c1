// What the user is looking at: file, step, rank, micro step, tab, selection, expansion, colouring and filters.
// It is mirrored into the URL (see url.ts) so a reload or a shared link restores the same view.
import type { Side } from "../api/types";

export type Tab = "graph" | "compare" | "overflow" | "monitor";
export type ColorMode = "legend" | "overflow" | "metric";
export type Lang = "en" | "zh";

export interface ViewState {
  run: string;
  file: string;
  step: number;
  rank: number;
  microStep: number; // -1 = all
  tab: Tab;
  selected: { side: Side; name: string } | null;
  expanded: Record<Side, string[]>;
  colorMode: ColorMode;
  metric: string;
  worstInside: boolean;
  search: string;
  regex: boolean;
  precisionFilter: string[];
  overflowFilter: string[];
  lang: Lang;
  /** each pane's view: [scale, world x, world y of the pane's centre]; null = fit to the graph */
  camera: Record<Side, [number, number, number] | null>;
}

export function defaultState(): ViewState {
  return {
    run: "",
    file: "",
    step: 0,
    rank: 0,
    microStep: -1,
    tab: "graph",
    selected: null,
    expanded: { NPU: [], Bench: [] },
    colorMode: "legend",
    metric: "",
    worstInside: true,
    search: "",
    regex: false,
    precisionFilter: [],
    overflowFilter: [],
    lang: "en",
    camera: { NPU: null, Bench: null },
  };
}

type Listener = (s: ViewState, changed: Set<keyof ViewState>) => void;

/** A tiny observable store: set() merges a patch and tells listeners which keys changed. */
export class Store {
  private listeners: Listener[] = [];
  constructor(public state: ViewState) {}

  subscribe(fn: Listener): () => void {
    this.listeners.push(fn);
    return () => {
      this.listeners = this.listeners.filter((l) => l !== fn);
    };
  }

  set(patch: Partial<ViewState>): void {
    const changed = new Set<keyof ViewState>();
    for (const k of Object.keys(patch) as (keyof ViewState)[]) {
      if (JSON.stringify(this.state[k]) !== JSON.stringify(patch[k])) changed.add(k);
    }
    if (!changed.size) return;
    this.state = { ...this.state, ...patch };
    for (const l of this.listeners) l(this.state, changed);
  }
}
