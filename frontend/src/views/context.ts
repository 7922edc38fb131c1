// What every view shares: the API client, the state store, the file's metadata and a few app-level actions.
import type { ApiClient, GraphKey, SideKey } from "../api/client";
import type { Meta, NodeColors, Side } from "../api/types";
import type { LayoutEngine } from "../layout/engine";
import type { Theme } from "../render/colors";
import type { Store } from "../state/state";

export interface AppContext {
  api: ApiClient;
  store: Store;
  engine: LayoutEngine;
  apiBase: string;
  meta(): Meta | null;
  graphKey(): GraphKey;
  sideKey(side: Side): SideKey;
  theme(): Theme;
  legend(): NodeColors;
  setLegend(c: NodeColors): void;
  error(e: unknown): void;
  /** hide the error banner: an action went through, the earlier error no longer holds */
  clearError(): void;
  /** a line of information above the page (closable), e.g. why "go to the first divergence" went where it did */
  notice(text: string): void;
  busy(delta: number): void;
  /** Show a node in the graph tab (switching rank, and step, first when given), select it and centre on it. */
  goToNode(side: Side, name: string, rank?: number, step?: number): Promise<void>;
}
