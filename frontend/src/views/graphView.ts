// The graph page: toolbar, breadcrumbs, one or two panes (debug and bench side by side for a compare file, with
// linked selection and synchronised expansion through matched_node_link), node details and the side panel.
import { SIDES, type NodeDetails, type NodeSummary, type Side } from "../api/types";
import { t } from "../i18n";
import type { LayoutNode } from "../layout/tree";
import { logScale, type LogScale } from "../render/colors";
import type { ColorMode } from "../state/state";
import type { AppContext } from "./context";
import { DetailsView } from "./details";
import { goToFirstDivergence } from "./firstDivergence";
import { clear, el, option } from "./dom";
import { GraphPane, MAX_AUTO_EXPAND, type PaneHost } from "./graphPane";
import { metricMagnitude } from "./format";
import { makeColouring, type Colouring } from "./paint";
import { SidePanel } from "./sidePanel";

/** Compare fields usable as a colour metric ("data_name" is a file reference, not a measurement). */
export function isMetricName(name: string): boolean {
  return name !== "data_name" && name !== "requires_grad";
}

/** The path to reveal a node's counterpart by: its link when the link ends at the counterpart, else null (a link
 * that ends elsewhere names a partner a manual match replaced; revealing it would open the wrong branch). */
export function counterpartPath(d: Pick<NodeDetails, "counterpart" | "matched_node_link">): string[] | null {
  const link = d.matched_node_link ?? [];
  return d.counterpart && link.length && link[link.length - 1] === d.counterpart ? link : null;
}

/** Breadcrumbs of a deeper path show its first CRUMBS_HEAD levels and its last ones, MAX_CRUMBS in all. */
const MAX_CRUMBS = 40;
const CRUMBS_HEAD = 3;

export class GraphView {
  readonly el: HTMLElement;
  readonly panes = new Map<Side, GraphPane>();
  readonly details: DetailsView;
  readonly side: SidePanel;
  private panesBox: HTMLElement;
  private breadcrumbs: HTMLElement;
  private metricSelect: HTMLSelectElement;
  private colorSelect: HTMLSelectElement;
  private worstBox: HTMLInputElement;
  private firstButton: HTMLButtonElement;
  private counterpart: { side: Side; name: string } | null = null;
  private highlights: Record<Side, Set<string>> = { NPU: new Set(), Bench: new Set() };
  private metricValues: Map<string, number> | null = null;
  private metricScaleValue: LogScale | null = null;
  private colourings = new Map<Side, Colouring>();
  private selectSeq = 0;
  /** while the state is being restored, camera moves are not written back */
  private restoring = false;
  private host: PaneHost;

  constructor(private ctx: AppContext) {
    this.host = this.makeHost();
    this.details = new DetailsView(ctx);
    this.side = new SidePanel(ctx, this);
    this.breadcrumbs = el("nav", { class: "ga-breadcrumbs", testid: "breadcrumbs" });
    this.panesBox = el("div", { class: "ga-panes" });
    const fit = el("button", { testid: "fit-button", title: t("fitTitle"), text: t("fit") });
    fit.addEventListener("click", () => this.fitAll());
    const depth = el("select", { testid: "expand-depth", title: t("expandDepth") },
      option("", `${t("expandDepth")}…`), ...[1, 2, 3, 4, 5, 6].map((d) => option(String(d), String(d))));
    depth.addEventListener("change", () => {
      const d = parseInt(depth.value, 10);
      depth.value = "";
      if (d > 0) void this.expandToDepth(d);
    });
    const collapseAll = el("button", { testid: "collapse-all", text: t("collapseAll") });
    collapseAll.addEventListener("click", () => this.collapseAll());
    // (the Compare tab had the only one: a user on the graph had to leave it to find where the runs part)
    this.firstButton = el("button", { testid: "graph-first-divergence", text: t("firstDivergence") });
    this.firstButton.addEventListener("click", () => {
      goToFirstDivergence(ctx).then((text) => { if (text) ctx.notice(text); }, (e) => ctx.error(e));
    });
    this.colorSelect = el("select", { testid: "color-mode-select", title: t("colorBy") },
      option("legend", t("colorLegend")), option("overflow", t("colorOverflow")), option("metric", t("colorMetric")));
    this.colorSelect.value = ctx.store.state.colorMode;
    this.colorSelect.addEventListener("change", () => ctx.store.set({ colorMode: this.colorSelect.value as ColorMode }));
    this.metricSelect = el("select", { class: "ga-metric-select", title: t("metric") });
    this.metricSelect.addEventListener("change", () => ctx.store.set({ metric: this.metricSelect.value }));
    this.worstBox = el("input", { type: "checkbox" });
    this.worstBox.checked = ctx.store.state.worstInside;
    this.worstBox.addEventListener("change", () => ctx.store.set({ worstInside: this.worstBox.checked }));
    const toolbar = el("div", { class: "ga-toolbar" }, fit, depth, collapseAll, this.firstButton,
      el("label", { class: "ga-inline" }, `${t("colorBy")}: `, this.colorSelect), this.metricSelect,
      el("label", { class: "ga-inline", title: t("worstInside") }, this.worstBox, ` ${t("worstInside")}`));
    const main = el("div", { class: "ga-graph-main" }, toolbar, this.breadcrumbs, this.panesBox, this.details.el);
    this.el = el("div", { class: "ga-graph-view" }, main, this.side.el);
    ctx.store.subscribe((s, changed) => {
      if (changed.has("colorMode") || changed.has("metric") || changed.has("worstInside")) {
        this.colorSelect.value = s.colorMode;
        this.worstBox.checked = s.worstInside;
        void this.refreshColours();
      }
    });
  }

  private makeHost(): PaneHost {
    const ctx = this.ctx;
    return {
      api: ctx.api,
      engine: ctx.engine,
      key: (side) => ctx.sideKey(side),
      microStep: () => ctx.store.state.microStep,
      theme: () => ctx.theme(),
      colouring: (side) => this.colouring(side),
      selectedOn: (side) => (ctx.store.state.selected?.side === side ? ctx.store.state.selected.name : null),
      counterpartOn: (side) => (this.counterpart?.side === side ? this.counterpart.name : null),
      highlighted: (side) => this.highlights[side],
      onSelect: (side, n) => void this.select(side, n.name),
      onToggle: (side, n, expanded) => void this.syncToggle(side, n, expanded),
      onLayout: () => this.saveExpansionSoon(),
      onCamera: (side, view) => {
        if (this.restoring) return;
        this.ctx.store.set({ camera: { ...this.ctx.store.state.camera, [side]: view } });
      },
      onBusy: (d) => ctx.busy(d),
      onError: (e) => ctx.error(e),
    };
  }

  private colouring(side: Side): Colouring {
    let c = this.colourings.get(side);
    if (!c) {
      const meta = this.ctx.meta()!;
      const s = this.ctx.store.state;
      c = makeColouring({ mode: s.colorMode, side, meta, legend: this.ctx.legend(), theme: this.ctx.theme(),
        worstInside: s.worstInside, metric: this.metricValues, scale: this.metricScaleValue });
      this.colourings.set(side, c);
    }
    return c;
  }

  /** Colours depend on mode, legend, theme and metric: rebuild and repaint. */
  async refreshColours(): Promise<void> {
    const s = this.ctx.store.state;
    this.metricSelect.hidden = s.colorMode !== "metric";
    if (s.colorMode === "metric") await this.loadMetric();
    this.colourings.clear();
    for (const p of this.panes.values()) p.repaint();
    this.side.legend.render();
  }

  /** The metric colour scale now in use (for the legend), or null. */
  metricScale(): { metric: string; scale: LogScale } | null {
    const s = this.ctx.store.state;
    if (s.colorMode !== "metric" || !this.metricScaleValue) return null;
    return { metric: this.metricSelect.value, scale: this.metricScaleValue };
  }

  private async loadMetric(): Promise<void> {
    const s = this.ctx.store.state;
    try {
      const probe = await this.ctx.api.filter(this.ctx.sideKey("NPU"), { limit: 50 });
      const names = new Set<string>();
      for (const k of Object.keys(this.ctx.meta()?.tool_tip ?? {})) names.add(k);
      for (const it of probe.items) for (const k of Object.keys(it.metrics ?? {})) names.add(k);
      const list = [...names].filter(isMetricName);
      clear(this.metricSelect);
      for (const n of list) this.metricSelect.append(option(n, n));
      const metric = s.metric && list.includes(s.metric) ? s.metric : list[0] ?? "";
      this.metricSelect.value = metric;
      if (!metric) {
        this.metricValues = null;
        this.metricScaleValue = null;
        return;
      }
      const resp = await this.ctx.api.allFiltered(this.ctx.sideKey("NPU"), { metric });
      const values = new Map<string, number>();
      for (const it of resp.items) {
        // (a NaN or infinite output takes the scale's worst colour: it was left uncoloured)
        const v = metricMagnitude(it.metrics?.[metric]);
        if (v !== null) values.set(it.name, v);
      }
      this.metricValues = values;
      this.metricScaleValue = logScale(values.values());
    } catch (e) {
      this.ctx.error(e);
    }
  }

  /** Load the current file/step/rank: panes, then the expansion and selection from the state. */
  async load(): Promise<void> {
    const meta = this.ctx.meta();
    if (!meta) return;
    this.firstButton.hidden = meta.graph_type !== "compare";
    this.colourings.clear();
    this.counterpart = null;
    this.highlights = { NPU: new Set(), Bench: new Set() };
    clear(this.panesBox);
    for (const p of this.panes.values()) p.dispose();
    this.panes.clear();
    for (const side of meta.sides) {
      const pane = new GraphPane(side, this.host, side === "NPU" ? "minimap" : `minimap-${side}`);
      this.panes.set(side, pane);
      this.panesBox.append(pane.el);
    }
    this.panesBox.classList.toggle("ga-two", meta.sides.length > 1);
    const s = this.ctx.store.state;
    this.metricSelect.hidden = s.colorMode !== "metric";
    if (s.colorMode === "metric") await this.loadMetric();
    await Promise.all([...this.panes.values()].map((p) => p.load()));
    // The selection's path first, in one request (the expansion saved in the link holds it, and restoring that
    // name by name cost one request per level)
    const selPane = s.selected ? this.panes.get(s.selected.side) : undefined;
    if (s.selected && selPane) {
      try {
        const d = await this.ctx.api.node(this.ctx.sideKey(s.selected.side), s.selected.name);
        await selPane.revealPath(d.path);
      } catch {
        /* select() below reports it */
      }
    }
    await Promise.all([...this.panes.values()].map((p) => p.expandNames(s.expanded[p.side])));
    // The view from the URL wins over fit and over centring on the selection.
    const views = { ...s.camera };
    this.restoring = true;
    try {
      for (const p of this.panes.values()) p.fit();
      if (s.selected && this.panes.has(s.selected.side)) {
        await this.select(s.selected.side, s.selected.name, { reveal: true });
      } else {
        this.details.clear();
        this.renderBreadcrumbs(null, null);
      }
      for (const p of this.panes.values()) {
        const v = views[p.side];
        if (v) p.setView(v);
      }
    } finally {
      setTimeout(() => (this.restoring = false), 250);
    }
    this.side.load();
  }

  private saveTimer: ReturnType<typeof setTimeout> | null = null;

  /** Many expansions in a row (expand-to-depth, restoring a link) save the state once. */
  private saveExpansionSoon(): void {
    if (this.saveTimer) return;
    this.saveTimer = setTimeout(() => {
      this.saveTimer = null;
      this.saveExpansion();
    }, 50);
  }

  private saveExpansion(): void {
    const expanded = { NPU: [] as string[], Bench: [] as string[] };
    for (const p of this.panes.values()) expanded[p.side] = p.expandedNames();
    this.ctx.store.set({ expanded });
  }

  /** Expanding or collapsing on one side does the same to the counterpart on the other side. */
  private async syncToggle(side: Side, n: LayoutNode, expanded: boolean): Promise<void> {
    const other = this.panes.get(side === "NPU" ? "Bench" : "NPU");
    if (!other || !n.summary.matched) return;
    // Counterparts usually share the name: ask for its children now, beside the details request that names the
    // real counterpart (the answers are cached by URL, so a wrong guess costs one request and nothing else).
    if (expanded) {
      const guess = other.byName.get(n.name);
      if (guess) other.prefetchChildren(guess);
    }
    try {
      const d = await this.ctx.api.node(this.ctx.sideKey(side), n.name);
      const link = counterpartPath(d);
      if (!link) return;
      const target = other.byName.get(link[link.length - 1]);
      if (expanded) {
        const m = await other.revealPath(link);
        if (m) await other.expandNode(m, false);
      } else if (target) {
        other.collapseNode(target, false);
      }
      this.saveExpansion();
    } catch (e) {
      this.ctx.error(e);
    }
  }

  /** Select a node: details, breadcrumbs, and the counterpart highlighted (and shown) on the other side. */
  async select(side: Side, name: string, opts: { reveal?: boolean; focus?: boolean } = {}): Promise<void> {
    const seq = ++this.selectSeq;
    this.ctx.store.set({ selected: { side, name } });
    for (const p of this.panes.values()) p.requestDraw();
    let d: NodeDetails;
    try {
      d = await this.ctx.api.node(this.ctx.sideKey(side), name);
    } catch (e) {
      this.ctx.error(e);
      return;
    }
    if (seq !== this.selectSeq) return;
    const pane = this.panes.get(side);
    if (pane && (opts.reveal || opts.focus)) {
      const n = await pane.revealPath(d.path);
      this.saveExpansion();
      if (n && (opts.focus || !pane.nodeRect(n.name))) pane.focus(n);
    }
    this.renderBreadcrumbs(side, d);
    const otherSide: Side = side === "NPU" ? "Bench" : "NPU";
    const other = this.panes.get(otherSide);
    this.counterpart = null;
    if (other && d.counterpart) {
      this.counterpart = { side: otherSide, name: d.counterpart };
      const link = counterpartPath(d);
      const m = link ? await other.revealPath(link) : other.byName.get(d.counterpart) ?? null;
      if (seq !== this.selectSeq) return;
      this.saveExpansion();
      if (m && !other.nodeRect(m.name)) other.focus(m);
    }
    for (const p of this.panes.values()) p.requestDraw();
    await this.details.show(side, d);
  }

  private renderBreadcrumbs(side: Side | null, d: NodeDetails | null): void {
    clear(this.breadcrumbs);
    this.breadcrumbs.append(el("span", { class: "ga-muted", text: `${t("breadcrumbsRoot")}: ` }));
    if (!side || !d) return;
    // A deep path shows its first and last levels (20,000 links made a page of breadcrumbs)
    const path = d.path;
    const skip = path.length > MAX_CRUMBS ? [CRUMBS_HEAD, path.length - (MAX_CRUMBS - CRUMBS_HEAD)] : null;
    path.forEach((name, i) => {
      if (skip && i >= skip[0] && i < skip[1]) {
        if (i === skip[0]) {
          this.breadcrumbs.append(el("span", { class: "ga-sep", text: " › " }),
            el("span", { class: "ga-muted", testid: "breadcrumbs-skipped", text: `… ${skip[1] - skip[0]} …` }));
        }
        return;
      }
      if (i) this.breadcrumbs.append(el("span", { class: "ga-sep", text: " › " }));
      const a = el("a", { href: "#", class: "ga-crumb", text: name });
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        void this.select(side, name, { focus: true });
      });
      this.breadcrumbs.append(a);
    });
  }

  setHighlights(side: Side, names: Iterable<string>): void {
    this.highlights[side] = new Set(names);
    this.panes.get(side)?.requestDraw();
  }

  fitAll(): void {
    for (const p of this.panes.values()) p.fit();
  }

  async expandToDepth(d: number): Promise<void> {
    const capped = await Promise.all([...this.panes.values()].map((p) => p.expandToDepth(d)));
    this.saveExpansion();
    this.fitAll();
    // (it stopped at the cap without a word, leaving 2,000 of 5,000 expandable nodes closed)
    if (capped.some(Boolean)) this.ctx.notice(t("expandCapped").replace("{n}", String(MAX_AUTO_EXPAND)));
  }

  collapseAll(): void {
    for (const p of this.panes.values()) p.collapseAll();
    this.saveExpansion();
    this.fitAll();
  }

  /**
   * A manual match changed nodes (precision, matched flags, counterparts): update those summaries in place on
   * their side, forget cached reads, and refresh the selection's details. Without a side list, reload instead.
   */
  async applyChanged(changed: NodeSummary[]): Promise<void> {
    this.ctx.api.clearCache();
    if (changed.some((c) => !c.side)) {
      await this.load();
      return;
    }
    for (const side of SIDES) this.panes.get(side)?.updateSummaries(changed.filter((c) => c.side === side));
    const sel = this.ctx.store.state.selected;
    if (sel) await this.select(sel.side, sel.name);
  }

  async reloadKeepingView(): Promise<void> {
    this.ctx.api.clearCache();
    await this.load();
  }

  redraw(): void {
    this.colourings.clear();
    for (const p of this.panes.values()) p.repaint();
  }
}
