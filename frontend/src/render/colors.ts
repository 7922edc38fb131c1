// Node colours: the legend (precision ranges from tb_config.node_colors), overflow levels, and a log scale for a
// numeric metric. Pure functions, unit-tested.
import type { NodeColors, OverflowLevel } from "../api/types";

export const DEFAULT_LEGEND: NodeColors = {
  "#FFFCF3": { value: [0, 0.3], description: "pass", accuracy_level: "pass" },
  "#FFDC7F": { value: [0.3, 0.6], description: "warning", accuracy_level: "warning" },
  "#FF704D": { value: [0.6, 1], description: "error", accuracy_level: "error" },
  "#C7C7C7": { value: [], description: "unmatched", accuracy_level: "unmatched node" },
};

export const OVERFLOW_COLORS: Record<OverflowLevel, string> = {
  medium: "#B6C7FC",
  high: "#7E96F0",
  critical: "#4668B8",
};
export const OVERFLOW_RANK: Record<OverflowLevel, number> = { medium: 1, high: 2, critical: 3 };

export interface Theme {
  dark: boolean;
  background: string;
  text: string;
  mutedText: string;
  stroke: string;
  neutral: string;
  /** a matched bench node in the precision legend: not grey, which the legend gives to unmatched nodes (a user read
   * the neutral grey bench pane as "all unmatched"); a pale blue no precision colour uses */
  benchMatched: string;
  selection: string;
  counterpart: string;
  highlight: string;
}

export const LIGHT: Theme = {
  dark: false, background: "#ffffff", text: "#202124", mutedText: "#5f6368", stroke: "#9aa0a6",
  neutral: "#F2F4F7", benchMatched: "#E3EDFA", selection: "#1a73e8", counterpart: "#e8710a", highlight: "#d93025",
};
export const DARK: Theme = {
  dark: true, background: "#202124", text: "#e8eaed", mutedText: "#9aa0a6", stroke: "#5f6368",
  neutral: "#3c4043", benchMatched: "#2A3A52", selection: "#8ab4f8", counterpart: "#fcad70", highlight: "#f28b82",
};

/** The unmatched entry of a legend: the one with an empty range. */
export function unmatchedColor(legend: NodeColors): string | null {
  for (const [color, e] of Object.entries(legend)) if (!e.value || e.value.length === 0) return color;
  return null;
}

/** The legend colour of a precision index; null precision = unmatched (compare) or no colour (build). */
export function legendColor(precision: number | null, legend: NodeColors, compare: boolean): string | null {
  if (precision === null || precision === undefined || Number.isNaN(precision)) {
    return compare ? unmatchedColor(legend) : null;
  }
  let best: string | null = null;
  let bestHi = -Infinity;
  for (const [color, e] of Object.entries(legend)) {
    if (!e.value || e.value.length !== 2) continue;
    const [lo, hi] = e.value;
    if (precision >= lo && precision < hi) return color;
    if (precision === hi && hi >= bestHi) {
      best = color; // a closed upper end for the top range ([0.6, 1] holds 1)
      bestHi = hi;
    }
  }
  return best;
}

/** legendColor with the legend's ranges read once: the per-node colour function of the drawing loop. */
export function legendLookup(legend: NodeColors): (precision: number | null, compare: boolean) => string | null {
  const ranges: [number, number, string][] = [];
  for (const [color, e] of Object.entries(legend)) if (e.value && e.value.length === 2) ranges.push([e.value[0], e.value[1], color]);
  const unmatched = unmatchedColor(legend);
  const cache = new Map<number, string | null>();
  return (p, compare) => {
    if (p === null || p === undefined || Number.isNaN(p)) return compare ? unmatched : null;
    let c = cache.get(p);
    if (c === undefined) {
      c = legendColor(p, legend, true);
      cache.set(p, c);
    }
    return c;
  };
}

/** Worse of two precision indexes (higher is worse); null counts as nothing known. */
export function worse(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  if (b === null) return a;
  return Math.max(a, b);
}

function hexToRgb(hex: string): [number, number, number] {
  const h = hex.replace("#", "");
  const full = h.length === 3 ? h.split("").map((c) => c + c).join("") : h;
  const n = parseInt(full.slice(0, 6), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

function rgbToHex(r: number, g: number, b: number): string {
  const c = (v: number) => Math.max(0, Math.min(255, Math.round(v))).toString(16).padStart(2, "0");
  return `#${c(r)}${c(g)}${c(b)}`;
}

/** Mix a colour toward another: t = 0 gives a, t = 1 gives b. */
export function mix(a: string, b: string, t: number): string {
  const [r1, g1, b1] = hexToRgb(a);
  const [r2, g2, b2] = hexToRgb(b);
  return rgbToHex(r1 + (r2 - r1) * t, g1 + (g2 - g1) * t, b1 + (b2 - b1) * t);
}

/** Stops of the metric scale: small values pale, large values dark red (readable on light and dark themes). */
export const METRIC_STOPS = ["#fff5d6", "#fdd17f", "#f99b4e", "#e5533a", "#b3123c", "#6b0343"];

export interface LogScale {
  min: number;
  max: number;
  color(v: number | null | undefined): string | null;
  /** position 0..1 of a value on the scale */
  t(v: number): number;
}

/**
 * A log10 colour scale over the positive values given. Zero and values below the smallest positive value take
 * the first stop; a missing value is null (drawn neutral). With one distinct value everything is mid-scale.
 */
export function logScale(values: Iterable<number>, stops: string[] = METRIC_STOPS): LogScale {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (!(v > 0) || !Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  const lmin = Math.log10(min);
  const lmax = Math.log10(max);
  const t = (v: number): number => {
    if (!(v > 0) || !Number.isFinite(min)) return 0;
    if (!Number.isFinite(v)) return 1;
    if (lmax === lmin) return 0.5;
    return Math.max(0, Math.min(1, (Math.log10(v) - lmin) / (lmax - lmin)));
  };
  return {
    min, max, t,
    color(v) {
      if (v === null || v === undefined || Number.isNaN(v)) return null;
      const x = t(Math.abs(v)) * (stops.length - 1);
      const i = Math.min(stops.length - 2, Math.floor(x));
      return mix(stops[i], stops[i + 1], x - i);
    },
  };
}

/** A readable text colour on a given fill. */
export function textOn(fill: string): string {
  const [r, g, b] = hexToRgb(fill);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#202124" : "#f8f9fa";
}
