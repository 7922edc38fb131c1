// The compare dashboard: every compared input/output/parameter of every debug node in one sortable, filterable
// table (sorted, filtered and paged by the server), "go to the first divergence", and CSV export.
import type { Row } from "../api/types";
import { t } from "../i18n";
import type { AppContext } from "./context";
import { clear, el, option } from "./dom";
import { isCompareField } from "./details";
import { goToFirstDivergence } from "./firstDivergence";
import { precisionClass } from "./format";

const PAGE = 500;

export function cellText(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Math.round(v * 1e6) / 1e6);
  return String(v);
}

const BASE = ["node", "order", "precision", "io", "key"];
const HIDDEN = new Set(["data_name"]);

/** The node's identity first, then the comparison results (what the table is for), then the raw statistics. */
export function orderColumns(columns: string[], toolTip: Record<string, string>): string[] {
  const base = BASE.filter((c) => columns.includes(c));
  const rest = columns.filter((c) => !base.includes(c) && !HIDDEN.has(c));
  const cmp = rest.filter((c) => isCompareField(c, toolTip));
  return [...base, ...cmp, ...rest.filter((c) => !cmp.includes(c))];
}

export class CompareView {
  readonly el: HTMLElement;
  private table: HTMLTableElement;
  private status: HTMLElement;
  private query: HTMLInputElement;
  private precision: HTMLSelectElement;
  private csv: HTMLAnchorElement;
  private more: HTMLButtonElement;
  private findingsBox: HTMLElement;
  private body: HTMLElement | null = null;
  private sort = "order";
  private desc = false;
  private rows: Row[] = [];
  private columns: string[] = [];
  private seq = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(private ctx: AppContext) {
    this.table = el("table", { class: "ga-table ga-compare-table", testid: "compare-table" });
    this.status = el("span", { class: "ga-muted" });
    this.query = el("input", { type: "search", placeholder: t("filterRows") });
    this.query.addEventListener("input", () => {
      if (this.timer) clearTimeout(this.timer);
      this.timer = setTimeout(() => void this.reload(), 250);
    });
    this.precision = el("select", {}, option("", t("all")), option("error", t("error")),
      option("warning", t("warning")), option("pass", t("pass")), option("unmatched", t("unmatched")));
    this.precision.addEventListener("change", () => void this.reload());
    const first = el("button", { testid: "first-divergence-button", text: t("firstDivergence") });
    first.addEventListener("click", () => void this.firstDivergence());
    this.csv = el("a", { class: "ga-button", testid: "export-csv", text: t("exportCsv"), download: "compare.csv" });
    this.more = el("button", { class: "ga-small", text: t("more") });
    this.more.addEventListener("click", () => void this.load(this.rows.length));
    this.findingsBox = el("span", { class: "ga-muted" });
    this.el = el("div", { class: "ga-compare-view" },
      el("div", { class: "ga-toolbar" }, this.query, this.precision, first, this.csv, this.status, this.findingsBox),
      el("div", { class: "ga-scroll" }, this.table, this.more));
  }

  private opts(): Record<string, string | number | boolean | undefined> {
    return { q: this.query.value || undefined, precision: this.precision.value || undefined,
      sort: this.sort === "order" ? undefined : this.sort, desc: this.desc };
  }

  async reload(): Promise<void> {
    this.rows = [];
    const k = this.ctx.graphKey();
    this.csv.href = this.ctx.api.compareCsvUrl(k, this.opts());
    this.csv.download = `${k.file.replace(/\.vis(\.db)?$/, "")}_${k.step}_${k.rank}.csv`;
    await this.load(0);
  }

  private async load(offset: number): Promise<void> {
    const seq = ++this.seq;
    try {
      const r = await this.ctx.api.compareTable(this.ctx.graphKey(), { ...this.opts(), offset, limit: PAGE });
      if (seq !== this.seq) return;
      const rows = r.rows ?? r.items ?? [];
      const columns = orderColumns(r.columns ?? Object.keys(rows[0] ?? {}), this.ctx.meta()?.tool_tip ?? {});
      // "More" adds its page to the table: rebuilding every row on each page made the n-th click cost n pages
      // (13.6 s at 11,000 rows, the tab frozen meanwhile)
      const append = offset > 0 && this.body !== null && columns.join("\n") === this.columns.join("\n");
      this.columns = columns;
      this.rows = offset ? this.rows.concat(rows) : rows;
      this.status.textContent = `${r.total} ${t("rows")}`;
      this.more.hidden = this.rows.length >= r.total;
      if (append) this.appendRows(rows);
      else this.render();
    } catch (e) {
      if (seq === this.seq) this.ctx.error(e);
    }
  }

  private render(): void {
    clear(this.table);
    const tip = this.ctx.meta()?.tool_tip ?? {};
    const hr = el("tr");
    for (const c of this.columns) {
      const th = el("th", { text: c, title: tip[c], class: c === this.sort ? (this.desc ? "ga-sort-desc" : "ga-sort-asc") : undefined });
      th.addEventListener("click", () => {
        this.desc = this.sort === c ? !this.desc : c !== "node" && c !== "key" && c !== "io" && c !== "order";
        this.sort = c;
        void this.reload();
      });
      hr.append(th);
    }
    this.body = el("tbody");
    this.table.append(el("thead", {}, hr), this.body);
    this.appendRows(this.rows);
  }

  private appendRows(rows: Row[]): void {
    const tbody = this.body!;
    for (const r of rows) {
      const p = typeof r.precision === "number" ? r.precision : null;
      const tr = el("tr", { testid: "compare-row", class: `ga-clickable ga-row-${precisionClass(p)}` });
      for (const c of this.columns) {
        let v = cellText(r[c]);
        // The key repeats the node name: show the part that says which input/output it is.
        if (c === "key" && typeof r.node === "string" && v.startsWith(r.node + ".")) v = v.slice(r.node.length + 1);
        tr.append(el("td", { text: v, title: c === "key" ? cellText(r[c]) : undefined }));
      }
      tr.addEventListener("click", () => void this.ctx.goToNode("NPU", String(r.node ?? r.name ?? "")));
      tbody.append(tr);
    }
  }

  private async firstDivergence(): Promise<void> {
    try {
      this.findingsBox.textContent = await goToFirstDivergence(this.ctx);
    } catch (e) {
      this.ctx.error(e);
    }
  }
}
