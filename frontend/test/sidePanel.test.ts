// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import { defaultState, Store } from "../src/state/state";
import type { AppContext } from "../src/views/context";
import type { GraphView } from "../src/views/graphView";
import { SidePanel } from "../src/views/sidePanel";

describe("search highlights", () => {
  it("switching the searched side clears the outlines left on the other side", async () => {
    const highlights: Record<string, string[]> = {};
    const graph = { setHighlights: (side: string, names: Iterable<string>) => (highlights[side] = [...names]) };
    const search = vi.fn(async (k: { side: string }) => ({ total: 1, items: [{ name: `${k.side}.hit`, precision: 0 }] }));
    const ctx = {
      api: { search, matches: async () => ({ matches: {} }), filter: async () => ({ total: 0, items: [] }) },
      store: new Store(defaultState()), meta: () => ({ sides: ["NPU", "Bench"], graph_type: "compare" }),
      sideKey: (side: string) => ({ side }), graphKey: () => ({}), legend: () => ({}), error: vi.fn(),
    } as unknown as AppContext;
    const panel = new SidePanel(ctx, graph as unknown as GraphView);
    panel.load();
    const input = panel.el.querySelector<HTMLInputElement>("[data-testid=search-input]")!;
    const sideSelect = panel.el.querySelector<HTMLSelectElement>(".ga-side-select")!;
    input.value = "hit";
    sideSelect.value = "NPU";
    sideSelect.dispatchEvent(new Event("change"));
    await vi.waitFor(() => expect(highlights.NPU).toEqual(["NPU.hit"]));
    sideSelect.value = "Bench";
    sideSelect.dispatchEvent(new Event("change"));
    await vi.waitFor(() => expect(highlights.Bench).toEqual(["Bench.hit"]));
    expect(highlights.NPU).toEqual([]);
  });
});
