// The Monitor view of GRAPH_ASCEND: heatmaps of a metric's statistic over step x module, step x rank and
// module x rank, a line chart of clicked cells (several series side by side), module filters and the anomaly list,
// each entry jumping to its cell. Data comes from `${apiBase}/api/monitor/...` (docs/monitor.md).
import { AnomalyItem, Heatmap, MonitorApi, MonitorJob, Mode, Series, SeriesSpec, num } from "./api";
import { LineChart } from "./chart";
import { SERIES_COLORS, fmt } from "./colors";
import { fillSelect, h, injectStyle, labelled, select } from "./dom";
import { HeatmapCanvas, Scale } from "./heatmap";
import { Strings, strings } from "./strings";

export interface MonitorContext {
  apiBase: string;
  lang: "en" | "zh";
}

const PAGE = 100;
const MAX_SERIES = 8;

interface TestHook {
  ready: boolean;
  rows(): string[];
  cols(): number;
  cellRect(row: number, col: number): { x: number; y: number; w: number; h: number } | null;
  highlighted(): { row: string; col: number } | null;
  series(): string[];
  anomalies(): number;
}

declare global {
  interface Window {
    __tbprobeMonitor?: TestHook;
  }
}

class MonitorView {
  private readonly api: MonitorApi;
  private readonly t: Strings;
  private jobs: MonitorJob[] = [];
  private job: MonitorJob | null = null;
  private mode: Mode = "step_module";
  private metric = "";
  private op = "norm";
  private rank = 0;
  private filter = "";
  private step: number | null = null;
  private scale: Scale = "row";
  private offset = 0;
  private data: Heatmap | null = null;
  private highlight: { row: string; col: number } | null = null;
  private specs: SeriesSpec[] = [];
  private series: Series[] = [];
  private marker: number | null = null;
  private anomalyItems: AnomalyItem[] = [];
  private focusModule: string | null = null;
  private loadToken = 0;
  private ready = false;

  private readonly heat = new HeatmapCanvas();
  private readonly chart = new LineChart();
  private readonly jobSel: HTMLSelectElement;
  private readonly modeSel: HTMLSelectElement;
  private readonly metricSel: HTMLSelectElement;
  private readonly opSel: HTMLSelectElement;
  private readonly rankSel: HTMLSelectElement;
  private readonly filterIn: HTMLInputElement;
  private readonly stepIn: HTMLInputElement;
  private readonly scaleSel: HTMLSelectElement;
  private readonly status = h("div", "mon-status", "monitor-status");
  private readonly pager = h("div", "mon-pager", "monitor-pager");
  private readonly anomalyBox = h("div", "", "monitor-anomalies");
  private readonly legend = h("div", "mon-legend", "monitor-legend");
  private readonly tooltip = h("div", "mon-tooltip", "monitor-tooltip");

  constructor(root: HTMLElement, ctx: MonitorContext) {
    this.api = new MonitorApi(ctx.apiBase);
    this.t = strings(ctx.lang);
    const t = this.t;
    injectStyle(root.ownerDocument);
    this.jobSel = select("monitor-job", [], "");
    this.modeSel = select("monitor-mode", (["step_module", "step_rank", "module_rank"] as Mode[]).map(
      (m) => [m, t[m]] as [string, string]), this.mode);
    this.metricSel = select("monitor-metric", [], "");
    this.opSel = select("monitor-op", [], "");
    this.rankSel = select("monitor-rank", [], "");
    this.filterIn = h("input", "mon-input", "monitor-filter");
    this.filterIn.placeholder = t.filterHint;
    this.stepIn = h("input", "mon-input", "monitor-step");
    this.stepIn.type = "number";
    this.stepIn.style.width = "7em";
    this.scaleSel = select("monitor-scale", [["row", t.scaleRow], ["log", t.scaleLog]], this.scale);

    const box = h("div", "mon-root", "monitor-root");
    const bar = h("div", "mon-toolbar", "monitor-toolbar");
    bar.append(labelled(t.job, this.jobSel), labelled(t.mode, this.modeSel), labelled(t.metric, this.metricSel),
      labelled(t.stat, this.opSel), labelled(t.rank, this.rankSel), labelled(t.filter, this.filterIn),
      labelled(t.step, this.stepIn), labelled(t.scale, this.scaleSel));
    const left = h("div", "mon-left");
    left.append(this.pager, this.heat.canvas);
    const side = h("div", "mon-side");
    side.append(h("h3", "", "", t.anomalies), this.anomalyBox);
    const main = h("div", "mon-main");
    main.append(left, side);
    const chartBox = h("div", "mon-chart-box", "monitor-chart-box");
    const clearBtn = h("button", "mon-btn", "monitor-clear-series", t.clear);
    const head = h("h3", "", "", t.chart + " ");
    head.append(clearBtn);
    chartBox.append(head, h("div", "mon-hint", "", t.clickHint), this.legend, this.chart.canvas);
    this.tooltip.style.display = "none";
    box.append(bar, this.status, main, chartBox, this.tooltip);
    root.append(box);

    this.jobSel.onchange = () => this.selectJob(this.jobSel.value);
    this.modeSel.onchange = () => {
      this.mode = this.modeSel.value as Mode;
      this.offset = 0;
      this.highlight = null;
      void this.load();
    };
    this.metricSel.onchange = () => { this.metric = this.metricSel.value; this.fillOps(); void this.load(); };
    this.opSel.onchange = () => { this.op = this.opSel.value; void this.load(); };
    this.rankSel.onchange = () => { this.rank = Number(this.rankSel.value); void this.load(); };
    this.scaleSel.onchange = () => { this.scale = this.scaleSel.value as Scale; this.redraw(); };
    let timer = 0;
    this.filterIn.oninput = () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(() => { this.filter = this.filterIn.value; this.offset = 0; void this.load(); }, 250);
    };
    this.stepIn.onchange = () => {
      this.step = this.stepIn.value === "" ? null : Number(this.stepIn.value);
      if (this.mode === "module_rank") void this.load();
    };
    clearBtn.onclick = () => { this.specs = []; this.series = []; this.marker = null; this.drawChart(); };
    this.heat.onCell = (r, c) => this.clickCell(r, c);
    this.heat.onHover = (r, c, x, y) => this.showTip(r, c, x, y);
    this.heat.onLeave = () => { this.tooltip.style.display = "none"; };
    new ResizeObserver(() => this.redraw()).observe(left);
    this.installTestHook();
    void this.start();
  }

  private async start(): Promise<void> {
    this.setStatus(this.t.loading);
    try {
      this.jobs = (await this.api.jobs()).jobs;
    } catch (e) {
      this.setStatus(String((e as Error).message), true);
      return;
    }
    if (!this.jobs.length) {
      this.setStatus(this.t.noJobs);
      this.ready = true;
      return;
    }
    fillSelect(this.jobSel, this.jobs.map((j) => [j.job, j.job] as [string, string]), this.jobs[0].job);
    await this.selectJob(this.jobs[0].job);
  }

  private async selectJob(name: string): Promise<void> {
    this.job = this.jobs.find((j) => j.job === name) || null;
    if (!this.job) return;
    const metrics = Object.keys(this.job.metrics);
    this.metric = metrics.includes(this.metric) ? this.metric : (metrics.includes("output") ? "output" : metrics[0]);
    fillSelect(this.metricSel, metrics.map((m) => [m, m] as [string, string]), this.metric);
    this.fillOps();
    this.rank = this.job.ranks.includes(this.rank) ? this.rank : this.job.ranks[0];
    fillSelect(this.rankSel, this.job.ranks.map((r) => [String(r), `rank${r}`] as [string, string]),
      String(this.rank));
    this.offset = 0;
    this.specs = [];
    this.series = [];
    this.focusModule = null;
    this.highlight = null;
    this.drawChart();
    await Promise.all([this.load(), this.loadAnomalies()]);
  }

  private fillOps(): void {
    const ops = (this.job && this.job.metrics[this.metric]) || ["norm"];
    if (!ops.includes(this.op)) this.op = ops.includes("norm") ? "norm" : ops[0];
    fillSelect(this.opSel, ops.map((o) => [o, o] as [string, string]), this.op);
  }

  private moduleForMode(): string | undefined {
    if (this.mode !== "step_rank") return undefined;
    // the module last clicked or jumped to, else the first row of the module heatmap on screen
    if (!this.focusModule && this.data && this.data.mode !== "step_rank") this.focusModule = this.data.rows[0];
    return this.focusModule || undefined;
  }

  async load(focus?: string): Promise<void> {
    if (!this.job) return;
    const token = ++this.loadToken;
    this.ready = false;
    this.setStatus(this.t.loading);
    try {
      const data = await this.api.heatmap({
        job: this.job.job, metric: this.metric, op: this.op, mode: this.mode,
        rank: this.mode === "step_module" ? this.rank : undefined, module: this.moduleForMode(),
        step: this.mode === "module_rank" && this.step !== null ? this.step : undefined,
        filter: this.mode === "step_rank" ? undefined : this.filter, offset: this.offset, limit: PAGE,
        max_cols: this.heat.columnsThatFit(), focus,
      });
      if (token !== this.loadToken) return;
      this.data = data;
      this.offset = data.offset;
      this.setStatus(`${data.total_rows} ${this.t.rows}`);
      this.drawPager();
      this.redraw();
    } catch (e) {
      if (token !== this.loadToken) return;
      this.data = null;
      this.redraw();
      this.setStatus(String((e as Error).message), true);
    }
    this.ready = true;
  }

  private async loadAnomalies(): Promise<void> {
    if (!this.job) return;
    const box = this.anomalyBox;
    try {
      const res = await this.api.anomalies(this.job.job);
      this.anomalyItems = res.items;
    } catch (e) {
      this.anomalyItems = [];
      box.replaceChildren(h("div", "mon-hint mon-error", "", String((e as Error).message)));
      return;
    }
    box.replaceChildren();
    if (!this.anomalyItems.length) box.append(h("div", "mon-hint", "", this.t.noAnomalies));
    for (const a of this.anomalyItems) {
      const b = h("button", "mon-anomaly", "monitor-anomaly");
      const v = num(a.value);
      b.append(h("span", "mon-rule", "", a.rule.replace("Anomaly", "")), ` · ${this.t.step} ${a.step} · rank${a.rank}`,
        h("br"), `${a.module} / ${a.metric}_${a.op} = ${v === null ? "-" : fmt(v)}`);
      b.onclick = () => void this.jump(a);
      box.append(b);
    }
  }

  private async jump(a: AnomalyItem): Promise<void> {
    this.mode = "step_module";
    this.modeSel.value = this.mode;
    this.metric = a.metric;
    this.metricSel.value = a.metric;
    this.fillOps();
    this.op = a.op;
    this.opSel.value = a.op;
    this.rank = a.rank;
    this.rankSel.value = String(a.rank);
    if (this.filter && !a.module.toLowerCase().includes(this.filter.toLowerCase())) {
      this.filter = "";
      this.filterIn.value = "";
    }
    await this.load(a.module);
    const col = this.colOfStep(a.step);
    this.highlight = { row: a.module, col };
    this.focusModule = a.module;
    this.redraw();
    this.addSeries({ rank: a.rank, module: a.module, metric: a.metric, op: a.op }, a.step);
  }

  private colOfStep(step: number): number {
    const cols = this.data?.cols || [];
    for (let i = 0; i < cols.length; i++) {
      const c = cols[i];
      if (Array.isArray(c) && step >= c[0] && step <= c[1]) return i;
    }
    return Math.max(0, cols.length - 1);
  }

  private clickCell(r: number, c: number): void {
    const d = this.data;
    if (!d) return;
    let spec: SeriesSpec;
    let marker: number | null = null;
    if (d.mode === "step_module") {
      spec = { rank: d.rank ?? this.rank, module: d.rows[r], metric: d.metric, op: d.op };
      marker = (d.cols[c] as [number, number])[0];
    } else if (d.mode === "step_rank") {
      spec = { rank: (d.ranks || [])[r], module: d.module || "", metric: d.metric, op: d.op };
      marker = (d.cols[c] as [number, number])[0];
    } else {
      spec = { rank: (d.ranks || [])[c], module: d.rows[r], metric: d.metric, op: d.op };
      marker = d.step ?? null;
    }
    this.highlight = { row: d.rows[r], col: c };
    this.focusModule = spec.module;
    this.redraw();
    this.addSeries(spec, marker);
  }

  private addSeries(spec: SeriesSpec, marker: number | null): void {
    const same = (s: SeriesSpec) => s.rank === spec.rank && s.module === spec.module && s.metric === spec.metric
      && s.op === spec.op;
    if (!this.specs.some(same)) {
      this.specs.push(spec);
      if (this.specs.length > MAX_SERIES) this.specs.shift();
    }
    this.marker = marker;
    void this.loadSeries();
  }

  private async loadSeries(): Promise<void> {
    if (!this.job) return;
    if (!this.specs.length) { this.series = []; this.drawChart(); return; }
    this.ready = false;
    try {
      this.series = (await this.api.series(this.job.job, this.specs, 1000)).series;
    } catch (e) {
      this.setStatus(String((e as Error).message), true);
    }
    this.drawChart();
    this.ready = true;
  }

  private drawChart(): void {
    this.chart.set(this.series, this.marker);
    this.legend.replaceChildren();
    this.series.forEach((s, i) => {
      const item = h("span", "mon-legend-item", "monitor-series-item");
      const sw = h("span", "mon-swatch");
      sw.style.background = SERIES_COLORS[i % SERIES_COLORS.length];
      const rm = h("button", "mon-btn", "monitor-series-remove", "×");
      rm.title = this.t.remove;
      rm.onclick = () => { this.specs.splice(i, 1); void this.loadSeries(); };
      item.append(sw, `rank${s.rank} ${s.module} ${s.metric}_${s.op}`, rm);
      this.legend.append(item);
    });
  }

  private drawPager(): void {
    const d = this.data;
    this.pager.replaceChildren();
    if (!d || d.total_rows <= PAGE) return;
    const prev = h("button", "", "monitor-prev", this.t.prev);
    const next = h("button", "", "monitor-next", this.t.next);
    prev.disabled = d.offset === 0;
    next.disabled = d.offset + PAGE >= d.total_rows;
    prev.onclick = () => { this.offset = Math.max(0, this.offset - PAGE); void this.load(); };
    next.onclick = () => { this.offset += PAGE; void this.load(); };
    this.pager.append(prev, `${d.offset + 1}–${Math.min(d.total_rows, d.offset + PAGE)} / ${d.total_rows}`, next);
  }

  private redraw(): void {
    const d = this.data;
    let hl: { row: number; col: number } | null = null;
    if (d && this.highlight) {
      const row = d.rows.indexOf(this.highlight.row);
      if (row >= 0) hl = { row, col: this.highlight.col };
    }
    this.heat.set(d, this.scale, hl);
    this.chart.draw();
  }

  private showTip(r: number, c: number, x: number, y: number): void {
    const d = this.data;
    if (!d) return;
    const col = d.cols[c];
    const where = Array.isArray(col) ? `${this.t.step} ${col[0]}${col[1] !== col[0] ? "–" + col[1] : ""}` : col;
    const v = num(d.values[r][c]);
    this.tooltip.textContent = `${d.rows[r]} · ${where} · ${v === null ? "-" : fmt(v)}`;
    this.tooltip.style.display = "block";
    this.tooltip.style.left = `${x + 12}px`;
    this.tooltip.style.top = `${y + 12}px`;
  }

  private setStatus(text: string, error = false): void {
    this.status.textContent = text;
    this.status.classList.toggle("mon-error", error);
  }

  private installTestHook(): void {
    const view = this;
    window.__tbprobeMonitor = {
      get ready() { return view.ready; },
      set ready(_v: boolean) { /* read-only */ },
      rows: () => (view.data ? view.data.rows.slice() : []),
      cols: () => view.heat.cols,
      cellRect: (row: number, col: number) => {
        const r = view.heat.cellRect(row, col);
        if (!r) return null;
        const b = view.heat.canvas.getBoundingClientRect();
        return { x: b.left + r.x, y: b.top + r.y, w: r.w, h: r.h };
      },
      highlighted: () => (view.highlight ? { ...view.highlight } : null),
      series: () => view.series.map((s) => `rank${s.rank}:${s.tag}`),
      anomalies: () => view.anomalyItems.length,
    };
  }
}

export function mountMonitor(root: HTMLElement, ctx: MonitorContext): void {
  new MonitorView(root, ctx);
}
