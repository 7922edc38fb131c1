import { describe, expect, it } from "vitest";
import { formatMetric, metricMagnitude } from "../src/views/format";

describe("metric values", () => {
  it("format keeps the sign and shows NaN and infinities as the server writes them", () => {
    expect(formatMetric(-0.96812)).toBe("-0.9681");
    expect(formatMetric("nan")).toBe("nan");
    expect(formatMetric(NaN)).toBe("nan");
    expect(formatMetric(-Infinity)).toBe("-inf");
    expect(formatMetric(2e-5)).toBe("2.000e-5");
  });

  it("a NaN or infinite value is the farthest from 0 when colouring by metric", () => {
    expect(metricMagnitude(-0.5)).toBe(0.5);
    expect(metricMagnitude("nan")).toBe(Infinity);
    expect(metricMagnitude("-inf")).toBe(Infinity);
    expect(metricMagnitude("N/A")).toBeNull();
    expect(metricMagnitude(undefined)).toBeNull();
  });
});
