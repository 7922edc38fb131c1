// Formatting shared by the lists and tables.

/** A metric value short enough for a list: 4 decimals, or exponent notation for very small or large values. */
export function formatMetric(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)) return v.toExponential(3);
  return String(Math.round(v * 1e4) / 1e4);
}

/** The legend class of a precision index with the default ranges (for list dots and row marks). */
export function precisionClass(p: number | null): string {
  if (p === null) return "none";
  if (p >= 0.6) return "error";
  if (p >= 0.3) return "warning";
  return "pass";
}
