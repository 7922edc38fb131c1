// The application shell: file / step / rank / micro-step selectors, the tabs, the error banner, the URL mirror,
// dark mode, the language, and the test hooks (window.__tbprobe) the end-to-end tests use.
import { ApiClient, ApiError, type GraphKey, type SideKey } from "../api/client";
import type { Meta, NodeColors, RunFile, Side } from "../api/types";
import { getLang, guessLang, setLang, t } from "../i18n";
import { LayoutEngine } from "../layout/engine";
import { DARK, DEFAULT_LEGEND, LIGHT, type Theme } from "../render/colors";
import { defaultState, Store, type Tab, type ViewState } from "../state/state";
import { embedInParentHash, extractFromParentHash, queryToState, stateToQuery } from "../state/url";
import { mountMonitor } from "./monitor/index";
import { CompareView } from "./compareView";
import type { AppContext } from "./context";
import { clear, el, option } from "./dom";
import { FIRST_PAGE } from "./childPages";
import { GraphView } from "./graphView";
import { OverflowView } from "./overflowView";
import { CSS } from "./style";
import { installHooks } from "./hooks";
import { LivePoller, mergeLiveMeta, type PollResult } from "./live";
import { followDarkMode } from "./theme";

const TABS: Tab[] = ["graph", "compare", "overflow", "monitor"];

/** The step to show of a file: the one asked for when it has it (`keep`), else a live file's newest, else the first. */
export function pickStep(meta: Pick<Meta, "steps" | "live">, step: number, keep: boolean): number {
  const steps = meta.steps.length ? meta.steps : [0];
  if (keep && steps.includes(step)) return step;
  return meta.live ? steps[steps.length - 1] : steps[0];
}

function parentWindow(): Window | null {
  try {
    if (window.parent && window.parent !== window && window.parent.location.href) return window.parent;
  } catch {
    /* cross-origin parent: keep to our own URL */
  }
  return null;
}

export class App {
  readonly root: HTMLElement;
  private api: ApiClient;
  private store: Store;
  private engine: LayoutEngine;
  private meta: Meta | null = null;
  private legend: NodeColors = DEFAULT_LEGEND;
  private theme: Theme = LIGHT;
  private files: { run: string; file: RunFile }[] = [];
  private busyCount = 0;
  private loaded = false;
  private ctx: AppContext;
  private graph: GraphView;
  private compare: CompareView;
  private overflow: OverflowView;
  private monitorBox: HTMLElement;
  private monitorMounted = false;
  private body: HTMLElement;
  private banner: HTMLElement;
  private bannerText: HTMLElement;
  private fileSelect: HTMLSelectElement;
  private stepSelect: HTMLSelectElement;
  private rankSelect: HTMLSelectElement;
  private microSelect: HTMLSelectElement;
  private langSelect: HTMLSelectElement;
  private tabButtons = new Map<Tab, HTMLButtonElement>();
  private message: HTMLElement;
  private notice: HTMLElement;
  private noticeText: HTMLElement;
  /** the link (or reload) named a step: a live file keeps it rather than opening on its newest */
  private stepFromLink: boolean;
  /** reads a live file's meta again: every 3 s while it changes, every 30 s after a minute without a change */
  private live = new LivePoller(() => this.pollLive());
  private urlTimer: ReturnType<typeof setTimeout> | null = null;
  private metaPrefetch: { run: string; file: string; meta: Promise<Meta> } | null = null;

  constructor(private readonly apiBase: string, host: HTMLElement) {
    this.api = new ApiClient(apiBase);
    this.engine = new LayoutEngine(new URL("static/worker.js", apiBase).href);
    const parent = parentWindow();
    const own = window.location.hash.replace(/^#/, "");
    const fromParent = parent ? extractFromParentHash(parent.location.hash) : null;
    const initial = queryToState(own || fromParent || "");
    this.stepFromLink = /(^|&)step=/.test(own || fromParent || "");
    if (!/(^|&)lang=/.test(own || fromParent || "")) initial.lang = guessLang(navigator.languages ?? []);
    setLang(initial.lang);
    this.store = new Store(initial);
    this.ctx = this.makeContext();

    const style = document.createElement("style");
    style.textContent = CSS;
    document.head.append(style);

    this.fileSelect = el("select", { testid: "file-select", title: t("file") });
    this.stepSelect = el("select", { testid: "step-select", title: t("step") });
    this.rankSelect = el("select", { testid: "rank-select", title: t("rank") });
    this.microSelect = el("select", { testid: "microstep-select", title: t("microStep") });
    this.langSelect = el("select", { testid: "lang-select", title: t("language") }, option("en", "English"),
      option("zh", "中文"));
    this.langSelect.value = initial.lang;
    this.fileSelect.addEventListener("focus", () => void this.refreshFiles());
    this.fileSelect.addEventListener("change", () => {
      const f = this.files[parseInt(this.fileSelect.value, 10)];
      if (f) void this.openFile(f.run, f.file.file, true);
    });
    this.stepSelect.addEventListener("change", () => this.changeGraph({ step: parseInt(this.stepSelect.value, 10) }));
    this.rankSelect.addEventListener("change", () => this.changeGraph({ rank: parseInt(this.rankSelect.value, 10) }));
    this.microSelect.addEventListener("change", () =>
      this.changeGraph({ microStep: parseInt(this.microSelect.value, 10) }));
    this.langSelect.addEventListener("change", () => {
      this.store.set({ lang: this.langSelect.value as "en" | "zh" });
      this.flushUrl();
      // The monitor view takes the language when it is mounted: drop it so it is mounted again, in the new one.
      clear(this.monitorBox);
      this.monitorMounted = false;
      // Every label is built in the chosen language: rebuild the page in place, keeping the view.
      this.rebuild();
    });
    const tabs = el("div", { class: "ga-tabs", role: "tablist" });
    const tabLabel: Record<Tab, "tabGraph"> = {
      graph: "tabGraph", compare: "tabCompare" as "tabGraph", overflow: "tabOverflow" as "tabGraph",
      monitor: "tabMonitor" as "tabGraph",
    };
    for (const tab of TABS) {
      const b = el("button", { testid: `view-tab-${tab}`, role: "tab", text: t(tabLabel[tab]) });
      b.addEventListener("click", () => this.showTab(tab));
      this.tabButtons.set(tab, b);
      tabs.append(b);
    }
    const topbar = el("div", { class: "ga-topbar" },
      el("label", { class: "ga-inline" }, `${t("file")}: `, this.fileSelect),
      el("label", { class: "ga-inline" }, `${t("step")}: `, this.stepSelect),
      el("label", { class: "ga-inline" }, `${t("rank")}: `, this.rankSelect),
      el("label", { class: "ga-inline" }, `${t("microStep")}: `, this.microSelect),
      tabs, el("span", { class: "ga-spacer" }), this.langSelect);
    this.bannerText = el("span", { class: "ga-error-text" });
    const closeBanner = el("button", { class: "ga-small", text: "×", "aria-label": "close" });
    closeBanner.addEventListener("click", () => (this.banner.hidden = true));
    this.banner = el("div", { class: "ga-error", testid: "error-banner", role: "alert", hidden: true },
      this.bannerText, el("span", { class: "ga-spacer" }), closeBanner);
    this.noticeText = el("span", { testid: "notice-text" });
    const closeNotice = el("button", { class: "ga-small", text: "×", "aria-label": t("close") });
    closeNotice.addEventListener("click", () => (this.notice.hidden = true));
    this.notice = el("div", { class: "ga-notice", testid: "notice", role: "status", hidden: true },
      this.noticeText, el("span", { class: "ga-spacer" }), closeNotice);
    this.message = el("div", { class: "ga-message" });
    this.graph = new GraphView(this.ctx);
    this.compare = new CompareView(this.ctx);
    this.overflow = new OverflowView(this.ctx);
    this.monitorBox = el("div", { class: "ga-monitor" });
    this.body = el("div", { class: "ga-body" });
    this.root = el("div", { class: "ga-root", testid: "ga-root", lang: initial.lang }, topbar, this.banner,
      this.notice, this.body);
    host.append(this.root);
    this.store.subscribe(() => this.scheduleUrl());
    followDarkMode(parentWindow(), (dark) => {
      this.theme = dark ? DARK : LIGHT;
      this.root.classList.toggle("ga-dark", dark);
      if (this.loaded) this.graph.redraw();
    });
    installHooks({
      ready: () => this.loaded && this.busyCount === 0 && this.api.inflight === 0,
      pane: (side) => this.graph.panes.get(side),
      selected: () => this.store.state.selected?.name ?? null,
      usesWorker: () => this.engine.usesWorker,
    });
  }

  private makeContext(): AppContext {
    return {
      api: this.api,
      store: this.store,
      engine: this.engine,
      apiBase: this.apiBase,
      meta: () => this.meta,
      graphKey: () => this.graphKey(),
      sideKey: (side) => ({ ...this.graphKey(), side }) as SideKey,
      theme: () => this.theme,
      legend: () => this.legend,
      setLegend: (c) => (this.legend = c),
      error: (e) => this.showError(e),
      clearError: () => this.clearError(),
      notice: (text) => this.showNotice(text),
      busy: (d) => (this.busyCount += d),
      goToNode: (side, name, rank, step) => this.goToNode(side, name, rank, step),
    };
  }

  private graphKey(): GraphKey {
    const s = this.store.state;
    return { run: s.run, file: s.file, step: s.step, rank: s.rank };
  }

  showError(e: unknown): void {
    const msg = e instanceof ApiError || e instanceof Error ? e.message : String(e);
    this.bannerText.textContent = msg;
    this.banner.hidden = false;
  }

  /** An action went through: the error of an earlier one no longer holds. */
  clearError(): void {
    this.banner.hidden = true;
    this.bannerText.textContent = "";
  }

  private showNotice(text: string): void {
    this.noticeText.textContent = text;
    this.notice.hidden = false;
  }

  private scheduleUrl(): void {
    if (this.urlTimer) clearTimeout(this.urlTimer);
    this.urlTimer = setTimeout(() => this.flushUrl(), 150);
  }

  /** Mirror the state into our own URL and, when the TensorBoard page is reachable, into its fragment too. */
  private flushUrl(): void {
    const q = stateToQuery(this.store.state);
    try {
      // Absolute: the plugin page has <base href="plugin/graph_ascend/">, which a bare "#..." would resolve against.
      history.replaceState(history.state, "", `${location.pathname}${location.search}#${q}`);
    } catch {
      /* sandboxed */
    }
    const parent = parentWindow();
    if (parent) {
      try {
        const hash = embedInParentHash(parent.location.hash, q);
        parent.history.replaceState(parent.history.state, "", parent.location.pathname + parent.location.search + hash);
      } catch {
        /* the parent refused: our own URL still holds the state */
      }
    }
  }

  /** Ask for a file's meta before it is needed (beside the file list). */
  private prefetchMeta(run: string, file: string): void {
    if (!this.metaPrefetch || this.metaPrefetch.run !== run || this.metaPrefetch.file !== file) {
      this.metaPrefetch = { run, file, meta: this.api.meta({ run, file }) };
      this.metaPrefetch.meta.catch(() => undefined);
    }
  }

  /**
   * Start the reads the first drawing needs (the roots and their first children, both sides at once), so they
   * travel together; the panes then find them in the cache. Only once the meta has told the file's steps and
   * sides: a root asked for before (step 0, the Bench side) was a 404 on every open of a build or live file.
   */
  private prefetchRoots(sides: Side[]): void {
    const s = this.store.state;
    for (const side of sides) {
      const key: SideKey = { run: s.run, file: s.file, step: s.step, rank: s.rank, side };
      this.api.root(key).then((r) => this.api.childrenCompact(key, r.name, s.microStep, 0, FIRST_PAGE)).catch(() => undefined);
    }
  }

  private async hasMonitorJobs(): Promise<boolean> {
    try {
      const body = await this.api.get<{ jobs?: unknown[] }>("monitor/runs");
      return Array.isArray(body.jobs) && body.jobs.length > 0;
    } catch {
      return false;   // (the Graph tab's message stands; the Monitor view reports its own errors)
    }
  }

  async start(): Promise<void> {
    this.busyCount++;
    performance.mark?.("tbprobe:start");
    try {
      const s0 = this.store.state;
      // The linked file's meta travels beside the file list (its roots follow once the meta is known).
      if (s0.run && s0.file) this.prefetchMeta(s0.run, s0.file);
      const runs = await this.api.runs();
      performance.mark?.("tbprobe:runs");
      this.setFiles(runs);
      const s = this.store.state;
      const linked = this.files.find((f) => f.run === s.run && f.file.file === s.file);
      if (linked) {
        await this.openFile(linked.run, linked.file.file, false);
        return;
      }
      // No link: the first compare file, else the first file; one that fails to open is skipped for the next
      // readable one (a damaged default file left the page on its error).
      const readable = this.files.filter((f) => !f.file.error);
      const order = [...readable.filter((f) => f.file.graph_type === "compare"),
        ...readable.filter((f) => f.file.graph_type !== "compare")];
      if (!order.length && this.files[0]) order.push(this.files[0]);
      if (!order.length) {
        this.message.textContent = t("noFiles");
        // (a log directory with the training monitor's files alone opened on this message, the Monitor button
        // left for the user to find)
        this.showTab(s.tab === "monitor" || await this.hasMonitorJobs() ? "monitor" : "graph");
        this.loaded = true;
        return;
      }
      let first: { label: string; error: unknown } | null = null;
      for (const [i, f] of order.entries()) {
        const last = i === order.length - 1;
        const error = await this.openFile(f.run, f.file.file, true, !last);
        if (!error) {
          if (first) {
            const why = first.error instanceof Error ? first.error.message : String(first.error);
            this.showNotice(t("fileSkipped").replace("{bad}", first.label).replace("{why}", why)
              .replace("{good}", this.label(f)));
          }
          break;
        }
        first ??= { label: this.label(f), error };
        if (last) this.showError(first.error);
      }
    } catch (e) {
      this.showError(e);
      this.loaded = true;
    } finally {
      this.busyCount--;
    }
  }

  private label(f: { run: string; file: RunFile }): string {
    return f.run === "." ? f.file.file : `${f.run}/${f.file.file}`;
  }

  private setFiles(runs: { runs: { run: string; files: RunFile[] }[] }): void {
    // Keep what the selector shows now (a file being opened may not be in the state yet).
    const shown = this.files[parseInt(this.fileSelect.value, 10)];
    const s = shown ? { run: shown.run, file: shown.file.file } : this.store.state;
    this.files = runs.runs.flatMap((r) => r.files.map((file) => ({ run: r.run, file })));
    clear(this.fileSelect);
    this.files.forEach((f, i) => {
      const label = this.label(f);
      const o = option(String(i), f.file.error ? `${label} (${f.file.error})` : label);
      o.disabled = !!f.file.error;
      o.selected = f.run === s.run && f.file.file === s.file;
      this.fileSelect.append(o);
    });
  }

  /** New files appear without a restart: the list is read again whenever the file selector gets the focus. */
  private async refreshFiles(): Promise<void> {
    try {
      this.setFiles(await this.api.runs());
    } catch {
      /* keep the list we have */
    }
  }

  /**
   * Open a file; `fresh` forgets the selection and expansion that belonged to the previous file. Returns the
   * error that kept it from opening (shown, unless `quiet`), or null.
   */
  async openFile(run: string, file: string, fresh: boolean, quiet = false): Promise<unknown> {
    this.busyCount++;
    this.stopLive();
    if (fresh) this.notice.hidden = true;   // (a notice is about the file it came with)
    try {
      const idx = this.files.findIndex((f) => f.run === run && f.file.file === file);
      if (idx >= 0) this.fileSelect.value = String(idx);
      this.prefetchMeta(run, file);
      const meta = await this.metaPrefetch!.meta;
      this.metaPrefetch = null;
      performance.mark?.("tbprobe:meta");
      this.meta = meta;
      this.legend = meta.node_colors && Object.keys(meta.node_colors).length ? meta.node_colors : DEFAULT_LEGEND;
      // meta.node_colors already is the edited legend when a legend side file exists (docs/http_api.md).
      const s = this.store.state;
      const patch: Partial<ViewState> = fresh
        ? { ...defaultState(), lang: s.lang, tab: s.tab, colorMode: s.colorMode, run, file }
        : { run, file };
      const ranks = meta.ranks.length ? meta.ranks : [0];
      const next = { ...s, ...patch };
      // A live file opens on its newest step, unless the link named one it still has.
      const step = pickStep(meta, next.step, !meta.live || (!fresh && this.stepFromLink));
      if (step !== next.step) patch.step = step;
      if (!ranks.includes(next.rank)) patch.rank = ranks[0];
      if (next.microStep >= meta.micro_steps) patch.microStep = -1;
      this.store.set(patch);
      this.prefetchRoots(meta.sides);
      this.fillSelectors(meta);
      const error = await this.reloadViews(quiet);
      if (meta.live) this.startLive();
      performance.mark?.("tbprobe:loaded");
      this.loaded = true;
      return error;
    } catch (e) {
      this.metaPrefetch = null;
      if (!quiet) this.showError(e);
      this.loaded = true;
      return e;
    } finally {
      this.busyCount--;
    }
  }

  private startLive(): void {
    this.live.start();
  }

  private stopLive(): void {
    this.live.stop();
  }

  /**
   * A live file's meta, read again (the collector adds steps while training runs and drops old ones, a rank or
   * the Bench side may come later): the selectors follow, the panes too when the sides changed, and a step that
   * was dropped while shown gives way to the newest, with a notice saying why. Only while the page is shown and
   * idle; one meta request (the server answers it from its cache when the file did not change). A file no longer
   * live is not read again; one unchanged for a minute is read every 30 s (LivePoller).
   */
  private async pollLive(): Promise<PollResult> {
    const cur = this.meta;
    if (!cur?.live) return "stop";
    if (!this.root.isConnected) return "stop"; // (a rebuilt page in another language replaced this one)
    if (this.busyCount > 0 || document.visibilityState !== "visible") return "same";
    const { run, file } = this.store.state;
    const m = await this.api.meta({ run, file });
    const s = this.store.state;
    if (this.meta !== cur || s.run !== run || s.file !== file) return "same";
    const { meta, changed, sidesChanged } = mergeLiveMeta(cur, m);
    if (!changed) return "same";
    this.meta = meta;
    const patch: Partial<ViewState> = {};
    const step = pickStep(meta, s.step, true);
    if (step !== s.step) {
      patch.step = step;
      this.showNotice(t("liveStepDropped").replace("{old}", String(s.step)).replace("{new}", String(step)));
    }
    const ranks = meta.ranks.length ? meta.ranks : [0];
    if (!ranks.includes(s.rank)) patch.rank = ranks[0];
    if (s.microStep >= meta.micro_steps) patch.microStep = -1;
    this.store.set(patch);
    this.fillSelectors(meta);
    if (sidesChanged || Object.keys(patch).length) await this.reloadViews();
    return meta.live ? "changed" : "stop";
  }

  private fillSelectors(meta: Meta): void {
    const s = this.store.state;
    const fill = (sel: HTMLSelectElement, values: number[], value: number) => {
      clear(sel);
      for (const v of values) sel.append(option(String(v), String(v)));
      sel.value = String(value);
      sel.disabled = values.length < 2;
    };
    fill(this.stepSelect, meta.steps.length ? meta.steps : [0], s.step);
    fill(this.rankSelect, meta.ranks.length ? meta.ranks : [0], s.rank);
    clear(this.microSelect);
    this.microSelect.append(option("-1", t("all")));
    for (let i = 0; i < meta.micro_steps; i++) this.microSelect.append(option(String(i), String(i)));
    this.microSelect.value = String(s.microStep);
    this.microSelect.disabled = meta.micro_steps < 2;
  }

  private changeGraph(patch: { step?: number; rank?: number; microStep?: number }): void {
    this.store.set(patch);
    void this.reloadViews();
  }

  /** Load the views of the current graph; returns the error that stopped them (shown unless `quiet`), or null. */
  private async reloadViews(quiet = false): Promise<unknown> {
    this.busyCount++;
    // (a new graph: an earlier action's error no longer holds; what goes wrong loading this one is shown)
    this.clearError();
    try {
      this.showTab(this.store.state.tab);
      await this.graph.load();
      const tab = this.store.state.tab;
      if (tab === "compare") await this.compare.reload();
      if (tab === "overflow") await this.overflow.reload();
      return null;
    } catch (e) {
      if (!quiet) this.showError(e);
      return e;
    } finally {
      this.busyCount--;
    }
  }

  showTab(tab: Tab): void {
    const changed = tab !== this.store.state.tab;
    this.store.set({ tab });
    for (const [k, b] of this.tabButtons) {
      b.classList.toggle("ga-active", k === tab);
      b.setAttribute("aria-selected", String(k === tab));
    }
    const compare = this.meta?.graph_type === "compare";
    this.tabButtons.get("compare")!.disabled = !!this.meta && !compare;
    clear(this.body);
    if (tab === "monitor") {
      if (!this.monitorMounted) {
        this.monitorMounted = true;
        mountMonitor(this.monitorBox, { apiBase: this.apiBase.replace(/\/$/, ""), lang: getLang() });
      }
      this.body.append(this.monitorBox);
      return;
    }
    if (!this.meta) {
      this.body.append(this.message);
      return;
    }
    if (tab === "graph") {
      this.body.append(this.graph.el);
      for (const p of this.graph.panes.values()) p.requestDraw();
    } else if (tab === "compare") {
      this.body.append(this.compare.el);
      if (changed) void this.compare.reload();
    } else {
      this.body.append(this.overflow.el);
      if (changed) void this.overflow.reload();
    }
  }

  async goToNode(side: Side, name: string, rank?: number, step?: number): Promise<void> {
    if (!name) return;
    this.busyCount++;
    try {
      const s = this.store.state;
      if ((rank !== undefined && rank !== s.rank) || (step !== undefined && step !== s.step)) {
        this.store.set({ rank: rank ?? s.rank, step: step ?? s.step, selected: { side, name }, tab: "graph" });
        this.rankSelect.value = String(this.store.state.rank);
        this.stepSelect.value = String(this.store.state.step);
        await this.reloadViews();
      }
      this.showTab("graph");
      await this.graph.select(side, name, { reveal: true, focus: true });
    } finally {
      this.busyCount--;
    }
  }

  /** Rebuild every view in the current language, keeping the state. */
  private rebuild(): void {
    const host = this.root.parentElement!;
    for (const p of this.graph.panes.values()) p.dispose();
    this.root.remove();
    const next = new App(this.apiBase, host);
    void next.start();
  }
}
