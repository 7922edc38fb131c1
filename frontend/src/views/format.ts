// Formatting shared by the lists and tables.

/** A metric value short enough for a list: 4 decimals, or exponent notation for very small or large values; the
 * server's "nan", "inf", "-inf" (and NaN or an infinity) as "nan", "inf", "-inf". The sign is kept. */
export function formatMetric(v: number | string): string {
  if (typeof v === "string") return v;
  if (Number.isNaN(v)) return "nan";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)) return v.toExponential(3);
  return String(Math.round(v * 1e4) / 1e4);
}

/** How far a metric value is from 0, for colouring by metric: NaN and infinities (the server's "nan", "inf",
 * "-inf") are the farthest; null for anything else that is no number. */
export function metricMagnitude(v: unknown): number | null {
  if (typeof v === "number") return Number.isNaN(v) ? Infinity : Math.abs(v);
  if (v === "nan" || v === "inf" || v === "-inf") return Infinity;
  return null;
}

/** The legend class of a precision index with the default ranges (for list dots and row marks). */
export function precisionClass(p: number | null): string {
  if (p === null) return "none";
  if (p >= 0.6) return "error";
  if (p >= 0.3) return "warning";
  return "pass";
}
