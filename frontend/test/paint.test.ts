import { describe, expect, it } from "vitest";
import type { Meta } from "../src/api/types";
import { makeNode } from "../src/layout/tree";
import { DARK, DEFAULT_LEGEND, LIGHT, logScale, OVERFLOW_COLORS, unmatchedColor } from "../src/render/colors";
import { makeColouring } from "../src/views/paint";
import { summary } from "./helpers";

const meta = (graph_type: "build" | "compare"): Meta => ({
  graph_type, task: "summary", steps: [0], ranks: [0], micro_steps: 1, overflow_check: true,
  sides: graph_type === "compare" ? ["NPU", "Bench"] : ["NPU"], node_colors: DEFAULT_LEGEND, tool_tip: {},
  writer: "msprobe", schema_version: null,
});

const colouring = (over: Partial<Parameters<typeof makeColouring>[0]> = {}) => makeColouring({
  mode: "legend", side: "NPU", meta: meta("compare"), legend: DEFAULT_LEGEND, theme: LIGHT, worstInside: true,
  metric: null, scale: null, ...over,
});

describe("node colouring", () => {
  it("debug side follows the legend; unmatched is grey", () => {
    const c = colouring();
    expect(c.fill(makeNode(summary("a", 0, { precision: 1 }), null, 0))).toBe("#FF704D");
    expect(c.fill(makeNode(summary("b", 0, { precision: null, matched: false }), null, 0))).toBe("#C7C7C7");
  });

  it("bench side: matched nodes in a colour of their own, not grey; grey only when unmatched", () => {
    // (precision lives on the debug side; the neutral grey of every matched bench node read as "all unmatched")
    for (const theme of [LIGHT, DARK]) {
      const c = colouring({ side: "Bench", theme });
      const matched = c.fill(makeNode(summary("a", 0, { precision: null, matched: true }), null, 0));
      expect(matched).toBe(theme.benchMatched);
      expect(matched).not.toBe(theme.neutral);
      expect(matched.toUpperCase()).not.toBe(unmatchedColor(DEFAULT_LEGEND));
      expect(c.fill(makeNode(summary("a", 0, { precision: null, matched: false }), null, 0))).toBe("#C7C7C7");
    }
    // no precision colour either: a bench node never looks like a pass, warning or error
    expect(Object.keys(DEFAULT_LEGEND)).not.toContain(LIGHT.benchMatched);
  });

  it("bench side outside the precision legend, and build graphs, stay neutral", () => {
    const n = makeNode(summary("a", 0, { precision: null, matched: true }), null, 0);
    expect(colouring({ side: "Bench", mode: "overflow" }).fill(n)).toBe(LIGHT.neutral);
    expect(colouring({ side: "Bench", meta: meta("build") }).fill(n)).toBe(LIGHT.neutral);
  });

  it("a box still loading (no name yet) is neutral", () => {
    expect(colouring().fill(makeNode(summary("", 0, { precision: 1 }), null, 0))).toBe(LIGHT.neutral);
  });

  it("overflow mode and build graphs use the overflow colours", () => {
    const n = makeNode(summary("a", 0, { overflow: "critical" }), null, 0);
    expect(colouring({ mode: "overflow" }).fill(n)).toBe(OVERFLOW_COLORS.critical);
    expect(colouring({ meta: meta("build") }).fill(n)).toBe(OVERFLOW_COLORS.critical);
  });

  it("metric mode: log scale on the debug side, neutral where there is no value and on the bench side", () => {
    const values = new Map([["a", 1e-4], ["b", 10]]);
    const scale = logScale(values.values());
    const c = colouring({ mode: "metric", metric: values, scale });
    expect(c.fill(makeNode(summary("a"), null, 0))).toBe(scale.color(1e-4));
    expect(c.fill(makeNode(summary("z"), null, 0))).toBe(LIGHT.neutral);
    expect(colouring({ mode: "metric", metric: values, scale, side: "Bench" }).fill(makeNode(summary("b"), null, 0)))
      .toBe(LIGHT.neutral);
  });

  it("a collapsed node shows the worst result inside only when it is worse than the node itself", () => {
    const c = colouring();
    const worse = makeNode(summary("m", 3, { precision: 0, subtree_precision: 1 }), null, 0);
    const same = makeNode(summary("m", 3, { precision: 1, subtree_precision: 1 }), null, 0);
    expect(c.badge(worse)).toBe("#FF704D");
    expect(c.badge(same)).toBeNull();
    expect(colouring({ worstInside: false }).badge(worse)).toBeNull();
    worse.expanded = true;
    expect(c.badge(worse)).toBeNull();
  });
});
