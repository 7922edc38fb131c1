// The line chart of clicked cells: several series side by side on shared axes, a marker at a chosen step,
// non-finite points shown as red ticks on the top edge (they have no place on a linear axis).
import { Series, num } from "./api";
import { HIGHLIGHT, POS_INF_COLOR, SERIES_COLORS, fitCanvas, fmt, theme } from "./colors";

const PAD = { l: 64, r: 12, t: 12, b: 26 };

export class LineChart {
  readonly canvas: HTMLCanvasElement;
  private series: Series[] = [];
  private marker: number | null = null;

  constructor() {
    this.canvas = document.createElement("canvas");
    this.canvas.dataset.testid = "monitor-chart";
    this.canvas.className = "mon-chart";
  }

  set(series: Series[], marker: number | null): void {
    this.series = series;
    this.marker = marker;
    this.draw();
  }

  /** Number of points drawn (finite and not), for tests and the status line. */
  pointCount(): number {
    return this.series.reduce((n, s) => n + s.points.length, 0);
  }

  draw(): void {
    const width = Math.max(300, (this.canvas.parentElement?.clientWidth || 800) - 4);
    const height = 240;
    const ctx = fitCanvas(this.canvas, width, height);
    const th = theme(this.canvas);
    ctx.clearRect(0, 0, width, height);
    if (!this.series.length) return;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of this.series) for (const [step, c] of s.points) {
      x0 = Math.min(x0, step); x1 = Math.max(x1, step);
      const v = num(c);
      if (v !== null && Number.isFinite(v)) { y0 = Math.min(y0, v); y1 = Math.max(y1, v); }
    }
    if (!Number.isFinite(x0)) return;
    if (!Number.isFinite(y0)) { y0 = 0; y1 = 1; }
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const padY = (y1 - y0) * 0.05;
    y0 -= padY; y1 += padY;
    if (x1 === x0) x1 = x0 + 1;
    const W = width - PAD.l - PAD.r, H = height - PAD.t - PAD.b;
    const X = (s: number) => PAD.l + ((s - x0) / (x1 - x0)) * W;
    const Y = (v: number) => PAD.t + (1 - (v - y0) / (y1 - y0)) * H;
    ctx.strokeStyle = th.line;
    ctx.fillStyle = th.muted;
    ctx.font = "11px sans-serif";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = y0 + ((y1 - y0) * i) / 4;
      const y = Y(v);
      ctx.beginPath(); ctx.moveTo(PAD.l, y); ctx.lineTo(width - PAD.r, y); ctx.stroke();
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      ctx.fillText(fmt(v), PAD.l - 4, y);
      const s = Math.round(x0 + ((x1 - x0) * i) / 4);
      ctx.textAlign = "center"; ctx.textBaseline = "top";
      ctx.fillText(String(s), X(s), height - PAD.b + 6);
    }
    if (this.marker !== null && this.marker >= x0 && this.marker <= x1) {
      ctx.strokeStyle = HIGHLIGHT;
      ctx.setLineDash([4, 3]);
      ctx.beginPath(); ctx.moveTo(X(this.marker), PAD.t); ctx.lineTo(X(this.marker), PAD.t + H); ctx.stroke();
      ctx.setLineDash([]);
    }
    this.series.forEach((s, i) => {
      ctx.strokeStyle = SERIES_COLORS[i % SERIES_COLORS.length];
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      let pen = false;
      for (const [step, c] of s.points) {
        const v = num(c);
        if (v === null || !Number.isFinite(v)) {
          pen = false;
          continue;
        }
        if (pen) ctx.lineTo(X(step), Y(v));
        else ctx.moveTo(X(step), Y(v));
        pen = true;
      }
      ctx.stroke();
      ctx.fillStyle = POS_INF_COLOR;
      for (const [step, c] of s.points) {
        const v = num(c);
        if (v !== null && !Number.isFinite(v)) ctx.fillRect(X(step) - 1, PAD.t, 3, 8);
      }
    });
  }
}
