import { describe, expect, it } from "vitest";
import type { NodeColors } from "../src/api/types";
import { DEFAULT_LEGEND, legendColor, logScale, METRIC_STOPS, mix, textOn, unmatchedColor } from "../src/render/colors";

describe("legend colours", () => {
  it("maps precision indexes to the reference's ranges, the top end closed", () => {
    expect(legendColor(0, DEFAULT_LEGEND, true)).toBe("#FFFCF3");
    expect(legendColor(0.29, DEFAULT_LEGEND, true)).toBe("#FFFCF3");
    expect(legendColor(0.3, DEFAULT_LEGEND, true)).toBe("#FFDC7F");
    expect(legendColor(0.5, DEFAULT_LEGEND, true)).toBe("#FFDC7F");
    expect(legendColor(0.6, DEFAULT_LEGEND, true)).toBe("#FF704D");
    expect(legendColor(1, DEFAULT_LEGEND, true)).toBe("#FF704D");
  });

  it("null precision is the unmatched colour in a compare graph and nothing in a build graph", () => {
    expect(legendColor(null, DEFAULT_LEGEND, true)).toBe("#C7C7C7");
    expect(legendColor(null, DEFAULT_LEGEND, false)).toBeNull();
  });

  it("follows an edited legend", () => {
    const custom: NodeColors = {
      "#000001": { value: [0, 0.5] }, "#000002": { value: [0.5, 1] }, "#000003": { value: [] },
    };
    expect(legendColor(0.4, custom, true)).toBe("#000001");
    expect(legendColor(1, custom, true)).toBe("#000002");
    expect(unmatchedColor(custom)).toBe("#000003");
  });
});

describe("log colour scale", () => {
  const scale = logScale([1e-6, 1e-3, 1, 10, 0, NaN]);

  it("spans the positive values on a log axis", () => {
    expect(scale.min).toBe(1e-6);
    expect(scale.max).toBe(10);
    expect(scale.t(1e-6)).toBe(0);
    expect(scale.t(10)).toBe(1);
    expect(scale.t(1e-3)).toBeCloseTo(3 / 7);
    expect(scale.color(1e-6)).toBe(METRIC_STOPS[0].toLowerCase());
    expect(scale.color(10)).toBe(METRIC_STOPS[METRIC_STOPS.length - 1].toLowerCase());
  });

  it("is monotonic in darkness and handles zero, missing and out-of-range values", () => {
    const lum = (c: string) => {
      const n = parseInt(c.slice(1), 16);
      return ((n >> 16) & 255) * 0.299 + ((n >> 8) & 255) * 0.587 + (n & 255) * 0.114;
    };
    const values = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10];
    const l = values.map((v) => lum(scale.color(v)!));
    for (let i = 1; i < l.length; i++) expect(l[i]).toBeLessThanOrEqual(l[i - 1]);
    expect(scale.color(0)).toBe(scale.color(1e-6));
    expect(scale.color(1e9)).toBe(scale.color(10));
    expect(scale.color(null)).toBeNull();
    expect(scale.color(undefined)).toBeNull();
  });

  it("a single value sits mid-scale; no value at all does not throw", () => {
    expect(logScale([5, 5]).t(5)).toBe(0.5);
    expect(logScale([]).color(1)).not.toBeNull();
  });

  it("mix and text colour", () => {
    expect(mix("#000000", "#ffffff", 0.5)).toBe("#808080");
    expect(textOn("#FFFCF3")).toBe("#202124");
    expect(textOn("#4668B8")).toBe("#f8f9fa");
  });
});
