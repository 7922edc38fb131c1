// The heatmap: one canvas, rows x columns of cells, row labels on the left and step/rank labels on top.
// Hit testing maps a click to (row, col); cellRect gives tests and the highlight a cell's position.
import { Cell, Heatmap, num } from "./api";
import { HIGHLIGHT, NAN_COLOR, NEG_INF_COLOR, POS_INF_COLOR, fitCanvas, ramp, theme } from "./colors";

export type Scale = "row" | "log";

const LABEL_W = 170;
const HEADER_H = 22;

export class HeatmapCanvas {
  readonly canvas: HTMLCanvasElement;
  private data: Heatmap | null = null;
  private scale: Scale = "row";
  private highlight: { row: number; col: number } | null = null;
  private cellW = 0;
  private cellH = 0;
  onCell: (row: number, col: number) => void = () => {};
  onHover: (row: number, col: number, x: number, y: number) => void = () => {};
  onLeave: () => void = () => {};

  constructor() {
    this.canvas = document.createElement("canvas");
    this.canvas.dataset.testid = "monitor-heatmap";
    this.canvas.className = "mon-heatmap";
    this.canvas.addEventListener("click", (e) => {
      const hit = this.hit(e.offsetX, e.offsetY);
      if (hit) this.onCell(hit.row, hit.col);
    });
    this.canvas.addEventListener("mousemove", (e) => {
      const hit = this.hit(e.offsetX, e.offsetY);
      if (hit) this.onHover(hit.row, hit.col, e.clientX, e.clientY);
      else this.onLeave();
    });
    this.canvas.addEventListener("mouseleave", () => this.onLeave());
  }

  set(data: Heatmap | null, scale: Scale, highlight: { row: number; col: number } | null): void {
    this.data = data;
    this.scale = scale;
    this.highlight = highlight;
    this.draw();
  }

  get rows(): number {
    return this.data ? this.data.rows.length : 0;
  }

  get cols(): number {
    return this.data && this.data.values.length ? this.data.values[0].length : this.data ? this.data.cols.length : 0;
  }

  /** CSS-pixel rectangle of a cell relative to the canvas. */
  cellRect(row: number, col: number): { x: number; y: number; w: number; h: number } | null {
    if (!this.data || row < 0 || col < 0 || row >= this.rows || col >= this.cols) return null;
    return { x: LABEL_W + col * this.cellW, y: HEADER_H + row * this.cellH, w: this.cellW, h: this.cellH };
  }

  hit(x: number, y: number): { row: number; col: number } | null {
    if (!this.data || x < LABEL_W || y < HEADER_H || this.cellW <= 0) return null;
    const col = Math.floor((x - LABEL_W) / this.cellW);
    const row = Math.floor((y - HEADER_H) / this.cellH);
    return row < this.rows && col < this.cols ? { row, col } : null;
  }

  /** How many step columns fit the current width (asked of the server as max_cols). */
  columnsThatFit(): number {
    const w = (this.canvas.parentElement?.clientWidth || 800) - LABEL_W - 4;
    return Math.max(10, Math.min(400, Math.floor(w / 3)));
  }

  draw(): void {
    const width = Math.max(300, (this.canvas.parentElement?.clientWidth || 800) - 4);
    const rows = this.rows;
    this.cellH = rows ? Math.max(8, Math.min(20, Math.floor(520 / rows))) : 0;
    const height = HEADER_H + rows * this.cellH + 4;
    const ctx = fitCanvas(this.canvas, width, height);
    const th = theme(this.canvas);
    ctx.clearRect(0, 0, width, height);
    if (!this.data || !rows) return;
    const cols = this.cols;
    this.cellW = (width - LABEL_W) / Math.max(1, cols);
    const logMode = this.scale === "log";
    const tr = (v: number) => (logMode ? Math.log10(Math.abs(v) + 1e-30) : v);
    let gmin = Infinity, gmax = -Infinity;
    if (logMode) {
      for (const r of this.data.values) for (const c of r) {
        const v = num(c);
        if (v !== null && Number.isFinite(v)) { gmin = Math.min(gmin, tr(v)); gmax = Math.max(gmax, tr(v)); }
      }
    }
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    this.data.values.forEach((rowVals: Cell[], r: number) => {
      let lo = gmin, hi = gmax;
      if (!logMode) {
        lo = Infinity; hi = -Infinity;
        for (const c of rowVals) {
          const v = num(c);
          if (v !== null && Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
        }
      }
      const y = HEADER_H + r * this.cellH;
      rowVals.forEach((c, k) => {
        const v = num(c);
        if (v === null) return;
        let color: string;
        if (Number.isNaN(v)) color = NAN_COLOR;
        else if (!Number.isFinite(v)) color = v > 0 ? POS_INF_COLOR : NEG_INF_COLOR;
        else color = ramp(hi > lo ? (tr(v) - lo) / (hi - lo) : 0.5);
        ctx.fillStyle = color;
        ctx.fillRect(LABEL_W + k * this.cellW, y, Math.ceil(this.cellW), this.cellH - (this.cellH > 10 ? 1 : 0));
      });
      ctx.fillStyle = th.fg;
      ctx.fillText(this.fitLabel(ctx, this.data!.rows[r], LABEL_W - 8), 4, y + this.cellH / 2);
    });
    // column labels: a few evenly spaced steps (or every rank)
    ctx.fillStyle = th.muted;
    const labels = this.data.cols;
    const every = Math.max(1, Math.ceil(labels.length / Math.max(1, Math.floor((width - LABEL_W) / 70))));
    for (let k = 0; k < labels.length; k += every) {
      const l = labels[k];
      const text = Array.isArray(l) ? String(l[0]) : String(l);
      ctx.fillText(text, LABEL_W + k * this.cellW + 1, HEADER_H / 2);
    }
    if (this.highlight) {
      const rect = this.cellRect(this.highlight.row, this.highlight.col);
      if (rect) {
        ctx.strokeStyle = HIGHLIGHT;
        ctx.lineWidth = 2;
        ctx.strokeRect(rect.x - 1, rect.y - 1, Math.max(4, rect.w + 2), rect.h + 2);
      }
    }
  }

  private fitLabel(ctx: CanvasRenderingContext2D, text: string, w: number): string {
    if (ctx.measureText(text).width <= w) return text;
    let t = text;
    while (t.length > 4 && ctx.measureText("…" + t).width > w) t = t.slice(1);
    return "…" + t; // keep the tail: the most specific part of a module name
  }
}
