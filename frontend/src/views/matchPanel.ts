// Manual match and unmatch (with descendants), loading and saving `.vis.config` files, and writing the edits into
// the database on explicit request (the server backs the file up first).
import type { Side } from "../api/types";
import { t } from "../i18n";
import type { AppContext } from "./context";
import { download, el } from "./dom";
import type { GraphView } from "./graphView";

/** The reference's side-file name: <file tag>_<step>_<rank>.vis.config, tag = the database name without .vis.db. */
export function visConfigName(file: string, step: number, rank: number): string {
  const tag = file.replace(/\.vis(\.db)?$/, "");
  return `${tag}_${step}_${rank}.vis.config`;
}

/** The {debug: bench} pairs of a .vis.config file's text; throws when the text is not such an object. */
export function configPairs(fileName: string, text: string): [string, unknown][] {
  const data = JSON.parse(text) as unknown;
  if (!data || typeof data !== "object" || Array.isArray(data)) throw new Error(`${fileName}: not a {debug: bench} object`);
  return Object.entries(data as Record<string, unknown>);
}

/** Match every pair, one refusal stopping none of the others; "debug → bench (why)" of each refused pair. */
export async function matchEach(pairs: [string, unknown][],
  match: (debug: string, bench: string) => Promise<unknown>): Promise<string[]> {
  const failed: string[] = [];
  for (const [debug, bench] of pairs) {
    if (typeof bench !== "string") {
      failed.push(`${debug} → ${JSON.stringify(bench)} (${t("configNotAName")})`);
      continue;
    }
    try {
      await match(debug, bench);
    } catch (e) {
      failed.push(`${debug} → ${bench} (${e instanceof Error ? e.message : String(e)})`);
    }
  }
  return failed;
}

const SHOWN_FAILURES = 10; // the banner is one line: the rest are counted, not listed

export class MatchPanel {
  readonly el: HTMLElement;
  private last: Record<Side, string | null> = { NPU: null, Bench: null };
  private pair: HTMLElement;
  private count: HTMLElement;
  private descendants: HTMLInputElement;
  private matchBtn: HTMLButtonElement;
  private unmatchBtn: HTMLButtonElement;

  constructor(private ctx: AppContext, private graph: GraphView) {
    this.pair = el("div", { class: "ga-pair ga-muted" });
    this.count = el("div", { class: "ga-muted" });
    this.descendants = el("input", { type: "checkbox", testid: "match-descendants" });
    this.matchBtn = el("button", { testid: "match-button", text: t("matchButton") });
    this.unmatchBtn = el("button", { testid: "unmatch-button", text: t("unmatchButton") });
    this.matchBtn.addEventListener("click", () => void this.doMatch());
    this.unmatchBtn.addEventListener("click", () => void this.doUnmatch());
    const fileInput = el("input", { type: "file", accept: ".config,.json,application/json", hidden: true });
    fileInput.addEventListener("change", () => void this.loadConfig(fileInput));
    const loadBtn = el("button", { class: "ga-small", text: t("loadConfig") });
    loadBtn.addEventListener("click", () => fileInput.click());
    const saveBtn = el("button", { class: "ga-small", text: t("saveConfig") });
    saveBtn.addEventListener("click", () => void this.saveConfig());
    const applyBtn = el("button", { class: "ga-small", text: t("applyEdits") });
    applyBtn.addEventListener("click", () => void this.apply());
    this.el = el("section", { class: "ga-match" }, el("h3", { text: t("match") }),
      el("p", { class: "ga-muted", text: t("matchHelp") }), this.pair,
      el("div", { class: "ga-row" }, this.matchBtn, this.unmatchBtn,
        el("label", { class: "ga-inline" }, this.descendants, ` ${t("descendants")}`)),
      el("div", { class: "ga-row" }, loadBtn, saveBtn, fileInput), this.count, el("div", { class: "ga-row" }, applyBtn));
    ctx.store.subscribe((s, changed) => {
      if (changed.has("selected") && s.selected) {
        this.last[s.selected.side] = s.selected.name;
        this.renderPair();
      }
    });
  }

  private renderPair(): void {
    this.pair.textContent = `${t("debug")}: ${this.last.NPU ?? "—"}   ·   ${t("bench")}: ${this.last.Bench ?? "—"}`;
    const compare = (this.ctx.meta()?.sides.length ?? 1) > 1;
    this.matchBtn.disabled = !compare || !this.last.NPU || !this.last.Bench;
    this.unmatchBtn.disabled = !compare || !this.last.NPU;
  }

  async load(): Promise<void> {
    const compare = (this.ctx.meta()?.sides.length ?? 1) > 1;
    this.el.hidden = !compare;
    this.last = { NPU: null, Bench: null };
    const sel = this.ctx.store.state.selected;
    if (sel) this.last[sel.side] = sel.name;
    this.renderPair();
    if (!compare) return;
    try {
      const m = await this.ctx.api.matches(this.ctx.graphKey());
      this.count.textContent = `${Object.keys(m.matches ?? {}).length} ${t("matchesCount")}`;
    } catch {
      this.count.textContent = "";
    }
  }

  private async doMatch(): Promise<void> {
    if (!this.last.NPU || !this.last.Bench) return;
    try {
      const r = await this.ctx.api.match(this.ctx.graphKey(), this.last.NPU, this.last.Bench, this.descendants.checked);
      await this.graph.applyChanged(r.changed ?? []);
      await this.load();
    } catch (e) {
      this.ctx.error(e);
    }
  }

  private async doUnmatch(): Promise<void> {
    if (!this.last.NPU) return;
    try {
      const r = await this.ctx.api.unmatch(this.ctx.graphKey(), this.last.NPU, this.descendants.checked);
      await this.graph.applyChanged(r.changed ?? []);
      await this.load();
    } catch (e) {
      this.ctx.error(e);
    }
  }

  private async loadConfig(input: HTMLInputElement): Promise<void> {
    const f = input.files?.[0];
    input.value = "";
    if (!f) return;
    await this.loadConfigText(f.name, await f.text());
  }

  /** Apply a .vis.config: every valid pair is matched, the refused ones are listed, and the graph and the count
   * refresh whatever was refused (some pairs may have been written). */
  async loadConfigText(fileName: string, text: string): Promise<void> {
    let pairs: [string, unknown][];
    let failed: string[];
    try {
      pairs = configPairs(fileName, text);
      failed = await matchEach(pairs, (d, b) => this.ctx.api.match(this.ctx.graphKey(), d, b, false));
    } catch (e) {
      this.ctx.error(e);
      return;
    }
    try {
      await this.graph.reloadKeepingView();
    } catch (e) {
      this.ctx.error(e);
    }
    await this.load();
    if (failed.length) this.ctx.error(new Error(failureMessage(fileName, failed, pairs.length)));
  }

  private async saveConfig(): Promise<void> {
    try {
      const k = this.ctx.graphKey();
      const m = await this.ctx.api.matches(k);
      download(m.file ?? visConfigName(k.file, k.step, k.rank), JSON.stringify(m.matches ?? {}, null, 2));
    } catch (e) {
      this.ctx.error(e);
    }
  }

  private async apply(): Promise<void> {
    if (!window.confirm(t("applyConfirm"))) return;
    try {
      const k = this.ctx.graphKey();
      await this.ctx.api.apply({ run: k.run, file: k.file });
      // the edits are the database's now (their side files retired): the graph shows them as stored matches
      // and the count of manual matches still to apply drops to what is left
      await this.graph.reloadKeepingView();
    } catch (e) {
      this.ctx.error(e);
    }
    await this.load();
  }
}

function failureMessage(fileName: string, failed: string[], total: number): string {
  const listed = failed.slice(0, SHOWN_FAILURES).join("; ");
  const more = failed.length > SHOWN_FAILURES ? `; … (+${failed.length - SHOWN_FAILURES})` : "";
  return `${fileName}: ${t("configPairsFailed")} (${failed.length}/${total}): ${listed}${more}`;
}
