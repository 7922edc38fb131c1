// The side panel: search, precision and overflow filters (server-side, paged), manual matching and the legend.
import type { ListItem, Side } from "../api/types";
import { t } from "../i18n";
import type { AppContext } from "./context";
import { clear, el, option } from "./dom";
import { isMetricName, type GraphView } from "./graphView";
import { LegendPanel } from "./legendPanel";
import { MatchPanel } from "./matchPanel";
import { formatMetric, precisionClass } from "./format";

const PAGE = 100;
const PRECISIONS = ["pass", "warning", "error", "unmatched"] as const;
const OVERFLOWS = ["medium", "high", "critical"] as const;


export class SidePanel {
  readonly el: HTMLElement;
  readonly match: MatchPanel;
  readonly legend: LegendPanel;
  private searchInput: HTMLInputElement;
  private regexBox: HTMLInputElement;
  private searchSide: HTMLSelectElement;
  private searchCount: HTMLElement;
  private searchWord: HTMLElement;
  private searchList: HTMLElement;
  private filterSide: HTMLSelectElement;
  private searchSideLabel: HTMLElement;
  private filterSideLabel: HTMLElement;
  private filterBoxes = new Map<string, HTMLInputElement>();
  private sortSelect: HTMLSelectElement;
  private descBox: HTMLInputElement;
  private filterCount: HTMLElement;
  private filterList: HTMLElement;
  private searchTimer: ReturnType<typeof setTimeout> | null = null;
  private searchSeq = 0;
  private filterSeq = 0;

  constructor(private ctx: AppContext, private graph: GraphView) {
    const s = ctx.store.state;
    this.searchInput = el("input", { type: "search", testid: "search-input", placeholder: t("searchPlaceholder") });
    this.searchInput.value = s.search;
    this.regexBox = el("input", { type: "checkbox", testid: "search-regex" });
    this.regexBox.checked = s.regex;
    // Each side choice says what it chooses: two bare "Debug (NPU)" selects, one by the search box and one under
    // the sort, read as one control drawn twice.
    this.searchSide = el("select", { class: "ga-side-select", testid: "search-side", "aria-label": t("searchIn") });
    // The count element holds the number alone (tests and screen readers read it); the word follows it.
    this.searchCount = el("span", { testid: "search-count", text: "" });
    this.searchWord = el("span", { class: "ga-muted", text: "" });
    this.searchList = el("ul", { class: "ga-list" });
    const onSearch = () => {
      if (this.searchTimer) clearTimeout(this.searchTimer);
      this.searchTimer = setTimeout(() => {
        ctx.store.set({ search: this.searchInput.value, regex: this.regexBox.checked });
        void this.runSearch(true);
      }, 200);
    };
    this.searchInput.addEventListener("input", onSearch);
    this.searchInput.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") {
        const first = this.searchList.querySelector<HTMLElement>("[data-testid=search-result]");
        first?.click();
      }
    });
    this.regexBox.addEventListener("change", onSearch);
    this.searchSide.addEventListener("change", () => void this.runSearch(true));

    this.filterSide = el("select", { class: "ga-side-select", testid: "filter-side", "aria-label": t("filterSide") });
    this.searchSideLabel = el("label", { class: "ga-inline ga-side-label" }, `${t("searchIn")}: `, this.searchSide);
    this.filterSideLabel = el("label", { class: "ga-inline ga-side-label" }, `${t("filterSide")}: `, this.filterSide);
    const precisionBox = el("div", { class: "ga-checks", testid: "precision-filter" });
    for (const p of PRECISIONS) precisionBox.append(this.check(p, s.precisionFilter.includes(p), "precision"));
    const overflowBox = el("div", { class: "ga-checks", testid: "overflow-filter" });
    for (const o of OVERFLOWS) overflowBox.append(this.check(o, s.overflowFilter.includes(o), "overflow"));
    this.sortSelect = el("select", { title: t("sortBy") }, option("order", t("order")), option("precision", t("precision")),
      option("name", t("name")));
    this.descBox = el("input", { type: "checkbox" });
    this.sortSelect.addEventListener("change", () => void this.runFilter(true));
    this.descBox.addEventListener("change", () => void this.runFilter(true));
    this.filterSide.addEventListener("change", () => void this.runFilter(true));
    this.filterCount = el("span", { class: "ga-count", testid: "filter-count" });
    this.filterList = el("ul", { class: "ga-list" });

    this.match = new MatchPanel(ctx, graph);
    this.legend = new LegendPanel(ctx, graph);
    this.el = el("aside", { class: "ga-side" },
      el("section", {}, el("h3", { text: t("search") }),
        el("div", { class: "ga-row" }, this.searchInput), el("div", { class: "ga-row" }, this.searchSideLabel),
        el("div", { class: "ga-row" }, el("label", { class: "ga-inline" }, this.regexBox, ` ${t("regex")}`),
          el("span", { class: "ga-count" }, this.searchCount, " ", this.searchWord)),
        this.searchList),
      el("section", {}, el("h3", { text: t("precisionFilter") }), precisionBox,
        el("h3", { text: t("overflowFilter") }), overflowBox,
        el("div", { class: "ga-row" }, el("label", { class: "ga-inline" }, `${t("sortBy")}: `, this.sortSelect),
          el("label", { class: "ga-inline" }, this.descBox, ` ${t("descending")}`)),
        el("div", { class: "ga-row" }, this.filterSideLabel),
        this.filterCount, this.filterList),
      this.match.el,
      this.legend.el);
  }

  private check(value: string, checked: boolean, group: "precision" | "overflow"): HTMLElement {
    const box = el("input", { type: "checkbox", value, "data-group": group });
    box.checked = checked;
    this.filterBoxes.set(`${group}:${value}`, box);
    box.addEventListener("change", () => {
      const pick = (g: string, values: readonly string[]) => values.filter((v) => this.filterBoxes.get(`${g}:${v}`)?.checked);
      this.ctx.store.set({ precisionFilter: pick("precision", PRECISIONS), overflowFilter: pick("overflow", OVERFLOWS) });
      void this.runFilter(true);
    });
    return el("label", { class: "ga-inline" }, box, ` ${t(value as "pass")}`);
  }

  /** Called after the graph loaded: fill the side selectors and re-run what the state asks for. */
  load(): void {
    const sides = this.ctx.meta()?.sides ?? ["NPU"];
    for (const [sel, label] of [[this.searchSide, this.searchSideLabel], [this.filterSide, this.filterSideLabel]] as const) {
      const keep = sel.value;
      clear(sel);
      for (const side of sides) sel.append(option(side, side === "NPU" ? t("debugSide") : t("benchSide")));
      sel.value = sides.includes(keep as Side) ? keep : "NPU";
      label.hidden = sides.length < 2;
    }
    void this.runSearch();
    void this.runFilter();
    void this.match.load();
    this.legend.render();
  }

  /**
   * Run the search box's query. `user`: the user changed it; when it goes through, the error banner of an earlier
   * action (a bad regular expression) is cleared (it stayed after the box was emptied and a filter applied).
   */
  private async runSearch(user = false): Promise<void> {
    const seq = ++this.searchSeq;
    const q = this.searchInput.value;
    const side = (this.searchSide.value || "NPU") as Side;
    clear(this.searchList);
    // the results of the side searched before would stay outlined there, as if they matched this search
    for (const other of this.ctx.meta()?.sides ?? []) if (other !== side) this.graph.setHighlights(other, []);
    if (!q) {
      this.searchCount.textContent = "";
      this.searchWord.textContent = "";
      this.graph.setHighlights(side, []);
      if (user) this.ctx.clearError();
      return;
    }
    try {
      const r = await this.ctx.api.search(this.ctx.sideKey(side), q, this.regexBox.checked, 0, PAGE);
      if (seq !== this.searchSeq) return;
      this.searchCount.textContent = String(r.total);
      this.searchWord.textContent = t("results");
      this.renderItems(this.searchList, "search-result", side, r.items, r.total);
      this.graph.setHighlights(side, r.items.map((i) => i.name));
      if (user) this.ctx.clearError();
    } catch (e) {
      if (seq !== this.searchSeq) return;
      this.searchCount.textContent = "0";
      this.searchWord.textContent = t("results");
      this.graph.setHighlights(side, []);
      this.ctx.error(e);
    }
  }

  /** Run the filters; `user` as for runSearch. */
  private async runFilter(user = false): Promise<void> {
    const seq = ++this.filterSeq;
    const s = this.ctx.store.state;
    const side = (this.filterSide.value || "NPU") as Side;
    clear(this.filterList);
    this.filterCount.textContent = "";
    if (!s.precisionFilter.length && !s.overflowFilter.length) {
      if (user) this.ctx.clearError();
      return;
    }
    try {
      const r = await this.ctx.api.filter(this.ctx.sideKey(side), {
        precision: s.precisionFilter.length ? s.precisionFilter : undefined,
        overflow: s.overflowFilter.length ? s.overflowFilter : undefined,
        sort: this.sortSelect.value, desc: this.descBox.checked, limit: PAGE,
      });
      if (seq !== this.filterSeq) return;
      this.filterCount.textContent = `${r.total} ${t("results")}`;
      this.renderItems(this.filterList, "filter-result", side, r.items, r.total);
      if (user) this.ctx.clearError();
      const metrics = new Set<string>();
      for (const it of r.items) for (const k of Object.keys(it.metrics ?? {})) metrics.add(k);
      for (const m of metrics) {
        if (isMetricName(m) && ![...this.sortSelect.options].some((o) => o.value === m)) this.sortSelect.append(option(m, m));
      }
    } catch (e) {
      if (seq === this.filterSeq) this.ctx.error(e);
    }
  }

  private renderItems(list: HTMLElement, testid: string, side: Side, items: ListItem[], total: number): void {
    for (const it of items) {
      const li = el("li", { testid, class: "ga-clickable", title: it.name },
        el("span", { class: `ga-dot ga-p-${precisionClass(it.precision)}` }),
        el("span", { class: "ga-item-name", text: it.name }));
      if (it.overflow) li.append(el("span", { class: `ga-badge ga-o-${it.overflow}`, text: it.overflow }));
      // On a line of their own, under the name: beside it they filled the row and left 1-2 letters of the name.
      // They are the node's worst output figures (a parameters_grad node's: its gradients), signed, NaN as "nan",
      // and say so: they were read as the node's own while they were its input's.
      const metrics = Object.entries(it.metrics ?? {}).filter(([k]) => isMetricName(k));
      if (metrics.length) {
        const of = it.name.includes(".parameters_grad.") ? t("worstGradient") : t("worstOutput");
        const text = `${of}: ` + metrics.slice(0, 3).map(([k, v]) => `${k}=${formatMetric(v)}`).join("  ");
        li.append(el("span", { class: "ga-metrics ga-muted", testid: `${testid}-metrics`, text,
          title: `${t("worstOutputTitle")}\n${metrics.map(([k, v]) => `${k}=${formatMetric(v)}`).join("\n")}` }));
      }
      li.addEventListener("click", () => void this.ctx.goToNode(side, it.name));
      list.append(li);
    }
    if (total > items.length) list.append(el("li", { class: "ga-muted", text: `… ${total - items.length}` }));
  }
}
