// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import type { NodeColors } from "../src/api/types";
import { DEFAULT_LEGEND, LIGHT } from "../src/render/colors";
import { defaultState, Store } from "../src/state/state";
import type { AppContext } from "../src/views/context";
import type { GraphView } from "../src/views/graphView";
import { LegendPanel, recolor } from "../src/views/legendPanel";

describe("legend recolouring", () => {
  it("refuses a colour another entry uses, whatever its spelling, since entries are keyed by colour", () => {
    expect(recolor(DEFAULT_LEGEND, "#FFFCF3", "#FFDC7F")).toBeNull();
    expect(recolor(DEFAULT_LEGEND, "#FFFCF3", "#ffdc7f")).toBeNull();
    expect(recolor({ "#111111": { value: [0, 1] }, "#ABC": { value: [] } }, "#111111", "#AABBCC")).toBeNull();
    expect(Object.keys(recolor(DEFAULT_LEGEND, "#FFDC7F", "#ffdc7f".toUpperCase()) ?? {})).toHaveLength(4);
  });

  function panel() {
    let legend: NodeColors = DEFAULT_LEGEND;
    const saveLegend = vi.fn(async () => ({}));
    const ctx = {
      store: new Store(defaultState()), api: { saveLegend }, meta: () => ({ graph_type: "compare" }),
      legend: () => legend, theme: () => LIGHT, setLegend: (c: NodeColors) => (legend = c), error: vi.fn(),
      graphKey: () => ({ run: "r", file: "f.vis.db", step: 0, rank: 0 }),
    } as unknown as AppContext;
    const p = new LegendPanel(ctx, { redraw: vi.fn() } as unknown as GraphView);
    p.render();
    const pick = (i: number, color: string) => {
      const input = p.el.querySelectorAll<HTMLInputElement>("input[type=color]")[i];
      input.value = color;
      input.dispatchEvent(new Event("change"));
    };
    return { p, pick, saveLegend, legend: () => legend };
  }

  it("the panel keeps every entry, saves nothing and says why when the colour is taken", async () => {
    const { p, pick, saveLegend, legend } = panel();
    pick(0, "#ffdc7f");
    await Promise.resolve();
    expect(Object.keys(legend())).toEqual(Object.keys(DEFAULT_LEGEND));
    expect(p.el.querySelectorAll("[data-testid=legend-item]")).toHaveLength(4);
    expect(saveLegend).not.toHaveBeenCalled();
    const msg = p.el.querySelector<HTMLElement>("[data-testid=legend-message]")!;
    expect(msg.hidden).toBe(false);
    expect(msg.textContent).toContain("#FFDC7F");
    expect(p.el.querySelector<HTMLInputElement>("input[type=color]")!.value).toBe("#fffcf3");
    pick(0, "#123456");
    await Promise.resolve();
    expect(Object.keys(legend())[0]).toBe("#123456");
    expect(saveLegend).toHaveBeenCalledTimes(1);
    expect(msg.hidden).toBe(true);
  });
});

describe("the legend describes both panes", () => {
  it("names grey as unmatched on either pane and shows the bench pane's matched colour (a user read the bench as all unmatched)", () => {
    const ctx = {
      store: new Store(defaultState()), api: {}, meta: () => ({ graph_type: "compare" }),
      legend: () => DEFAULT_LEGEND, theme: () => LIGHT, setLegend: vi.fn(), error: vi.fn(),
      graphKey: () => ({ run: "r", file: "f.vis.db", step: 0, rank: 0 }),
    } as unknown as AppContext;
    const p = new LegendPanel(ctx, { redraw: vi.fn() } as unknown as GraphView);
    p.render();
    const labels = [...p.el.querySelectorAll("[data-testid=legend-item]")].map((e) => e.textContent ?? "");
    expect(labels.find((l) => l.startsWith("unmatched"))).toContain("either pane");
    const bench = p.el.querySelector<HTMLElement>("[data-testid=legend-bench-matched]")!;
    expect(bench.textContent).toContain("Bench, matched");
    expect(bench.querySelector<HTMLElement>(".ga-swatch")!.style.background).toBe("rgb(227, 237, 250)"); // #E3EDFA
  });
});
