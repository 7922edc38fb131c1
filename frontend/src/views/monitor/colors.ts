// Colours of the monitor view: a perceptual colour map for heatmap cells, distinct colours for series, and the
// theme colours read from the page (the view sits inside .ga-root, whose CSS variables follow dark mode).

const STOPS: Array<[number, number, number]> = [
  [68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37],
];

/** Viridis-like colour for t in [0, 1]. */
export function ramp(t: number): string {
  const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(x));
  const f = x - i;
  const a = STOPS[i], b = STOPS[i + 1];
  const c = (k: number) => Math.round(a[k] + (b[k] - a[k]) * f);
  return `rgb(${c(0)},${c(1)},${c(2)})`;
}

export const NAN_COLOR = "#e040fb";
export const POS_INF_COLOR = "#d50000";
export const NEG_INF_COLOR = "#00b8d4";
export const HIGHLIGHT = "#ff6d00";

export const SERIES_COLORS = ["#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#12b5cb", "#f9ab00",
  "#b31412"];

export interface Theme {
  fg: string;
  muted: string;
  line: string;
  bg: string;
}

export function theme(el: Element): Theme {
  const cs = getComputedStyle(el);
  const v = (name: string, fallback: string) => cs.getPropertyValue(name).trim() || fallback;
  return { fg: v("--fg", "#202124"), muted: v("--muted", "#5f6368"), line: v("--line", "#dadce0"),
    bg: v("--bg", "#ffffff") };
}

/** Size a canvas for the device pixel ratio; returns its 2D context scaled to CSS pixels. */
export function fitCanvas(canvas: HTMLCanvasElement, width: number, height: number): CanvasRenderingContext2D {
  const dpr = window.devicePixelRatio || 1;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.width = Math.max(1, Math.round(width * dpr));
  canvas.height = Math.max(1, Math.round(height * dpr));
  const ctx = canvas.getContext("2d")!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

export function fmt(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "+Inf" : "-Inf";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(3);
  return String(Number(v.toPrecision(5)));
}
