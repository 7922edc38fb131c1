// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import { LIGHT } from "../src/render/colors";
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
      sideKey: (side: string) => ({ side }), graphKey: () => ({}), legend: () => ({}), theme: () => LIGHT, error: vi.fn(),
      clearError: vi.fn(),
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

describe("error banner", () => {
  it("an error of a search is cleared once the box is emptied and a filter goes through", async () => {
    const search = vi.fn(async () => {
      throw new Error("bad regular expression");
    });
    const filter = vi.fn(async () => ({ total: 1, items: [{ name: "Module.a.forward.0", precision: 1 }] }));
    const error = vi.fn();
    const clearError = vi.fn();
    const ctx = {
      api: { search, matches: async () => ({ matches: {} }), filter },
      store: new Store(defaultState()), meta: () => ({ sides: ["NPU"], graph_type: "compare" }),
      sideKey: (side: string) => ({ side }), graphKey: () => ({}), legend: () => ({}), theme: () => LIGHT, error, clearError,
    } as unknown as AppContext;
    const panel = new SidePanel(ctx, { setHighlights: () => undefined } as unknown as GraphView);
    panel.load();
    const input = panel.el.querySelector<HTMLInputElement>("[data-testid=search-input]")!;
    input.value = "(";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect(error).toHaveBeenCalledTimes(1));
    expect(clearError).not.toHaveBeenCalled();
    input.value = "";
    input.dispatchEvent(new Event("input"));
    await vi.waitFor(() => expect(clearError).toHaveBeenCalledTimes(1));
    const box = panel.el.querySelector<HTMLInputElement>("[data-testid=precision-filter] input[value=error]")!;
    box.checked = true;
    box.dispatchEvent(new Event("change"));
    await vi.waitFor(() => expect(clearError).toHaveBeenCalledTimes(2));
    expect(filter).toHaveBeenCalledTimes(1);
    expect(error).toHaveBeenCalledTimes(1);
  });
});

describe("filter results", () => {
  it("put the metrics in an element of their own, after the name and the overflow badge", async () => {
    const filter = async () => ({ total: 1, items: [{ name: "Module.layers.0.Linear.forward.0", precision: 1,
      overflow: "high", metrics: { "Max diff": 1.5, "Min diff": 0, "Mean diff": 0.5 } }] });
    const ctx = {
      api: { search: async () => ({ total: 0, items: [] }), matches: async () => ({ matches: {} }), filter },
      store: new Store({ ...defaultState(), precisionFilter: ["error"] }),
      meta: () => ({ sides: ["NPU"], graph_type: "compare" }), sideKey: (side: string) => ({ side }),
      graphKey: () => ({}), legend: () => ({}), theme: () => LIGHT, error: vi.fn(), clearError: vi.fn(),
    } as unknown as AppContext;
    const panel = new SidePanel(ctx, { setHighlights: () => undefined } as unknown as GraphView);
    panel.load();
    await vi.waitFor(() => expect(panel.el.querySelector("[data-testid=filter-result]")).not.toBeNull());
    const li = panel.el.querySelector("[data-testid=filter-result]")!;
    expect([...li.children].map((c) => c.className)).toEqual(
      ["ga-dot ga-p-error", "ga-item-name", "ga-badge ga-o-high", "ga-metrics ga-muted"]);
    expect(li.querySelector(".ga-metrics")!.textContent).toContain("Max diff=");
  });
});

describe("filter result metrics", () => {
  const panelWith = async (items: unknown[]) => {
    const filter = async () => ({ total: items.length, items });
    const ctx = {
      api: { search: async () => ({ total: 0, items: [] }), matches: async () => ({ matches: {} }), filter },
      store: new Store({ ...defaultState(), precisionFilter: ["error"] }),
      meta: () => ({ sides: ["NPU"], graph_type: "compare" }), sideKey: (side: string) => ({ side }),
      graphKey: () => ({}), legend: () => ({}), theme: () => LIGHT, error: vi.fn(), clearError: vi.fn(),
    } as unknown as AppContext;
    const panel = new SidePanel(ctx, { setHighlights: () => undefined } as unknown as GraphView);
    panel.load();
    await vi.waitFor(() => expect(panel.el.querySelectorAll("[data-testid=filter-result]").length).toBe(items.length));
    return [...panel.el.querySelectorAll("[data-testid=filter-result-metrics]")].map((m) => m.textContent);
  };

  it("say they are the output's, keep the sign and show NaN as nan (an all-NaN output read Max diff=0)", async () => {
    const texts = await panelWith([
      { name: "Tensor.__add__.3.forward", precision: 1,
        metrics: { "Max diff": "nan", "Min diff": "nan", "Mean diff": "nan" } },
      { name: "Torch.log.0.forward", precision: 1, metrics: { "Max diff": 0.9709, "Min diff": -0.968, "Mean diff": -0.0042 } },
      { name: "Module.fc.Linear.parameters_grad.0", precision: 1, metrics: { "Max diff": -0.5 } },
    ]);
    expect(texts).toEqual([
      "output: Max diff=nan  Min diff=nan  Mean diff=nan",
      "output: Max diff=0.9709  Min diff=-0.968  Mean diff=-0.0042",
      "gradients: Max diff=-0.5",
    ]);
  });
});

describe("side choices", () => {
  function panelFor(sides: string[]) {
    const ctx = {
      api: { search: async () => ({ total: 0, items: [] }), matches: async () => ({ matches: {} }),
        filter: async () => ({ total: 0, items: [] }) },
      store: new Store(defaultState()), meta: () => ({ sides, graph_type: "compare" }),
      sideKey: (side: string) => ({ side }), graphKey: () => ({}), legend: () => ({}), theme: () => LIGHT,
      error: vi.fn(), clearError: vi.fn(),
    } as unknown as AppContext;
    const panel = new SidePanel(ctx, { setHighlights: () => undefined } as unknown as GraphView);
    panel.load();
    return panel;
  }

  it("each of the two side selects says what it chooses (two bare 'Debug (NPU)' selects read as one drawn twice)", () => {
    const panel = panelFor(["NPU", "Bench"]);
    const label = (id: string) => panel.el.querySelector(`[data-testid=${id}]`)!.closest("label")!;
    const search = label("search-side");
    const filter = label("filter-side");
    expect(search.hidden).toBe(false);
    expect(search.firstChild!.textContent).toBe("Search in: ");
    expect(filter.firstChild!.textContent).toBe("List nodes of: ");
    expect(panel.el.querySelector("[data-testid=search-side]")!.getAttribute("aria-label")).toBe("Search in");
  });

  it("a one-sided graph hides both choices, labels included", () => {
    const panel = panelFor(["NPU"]);
    for (const id of ["search-side", "filter-side"]) {
      expect(panel.el.querySelector(`[data-testid=${id}]`)!.closest("label")!.hidden).toBe(true);
    }
  });
});
