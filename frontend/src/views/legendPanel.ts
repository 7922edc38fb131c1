// The colour legend, editable: each entry's colour can be changed; the edit is saved by the server in a side file
// (<file>.legend.json), never in the database itself unless the user applies edits.
import type { LegendEntry, NodeColors } from "../api/types";
import { t } from "../i18n";
import { METRIC_STOPS, OVERFLOW_COLORS } from "../render/colors";
import { formatMetric } from "./format";
import type { AppContext } from "./context";
import { clear, el } from "./dom";
import type { GraphView } from "./graphView";

/** #abc and #AABBCC are one colour: the form colours are compared in. */
export function canonicalColor(color: string): string {
  const hex = color.replace("#", "").toUpperCase();
  return `#${hex.length === 3 ? [...hex].map((c) => c + c).join("") : hex}`;
}

/** The key of the entry other than `except` that already paints with `color`, or null. */
export function colorOwner(legend: NodeColors, color: string, except: string): string | null {
  const wanted = canonicalColor(color);
  for (const k of Object.keys(legend)) if (k !== except && canonicalColor(k) === wanted) return k;
  return null;
}

/** Replace one colour key of a legend, keeping the order of entries; null when another entry already uses `to`,
 * because the legend is keyed by colour and the two entries would collapse into one. */
export function recolor(legend: NodeColors, from: string, to: string): NodeColors | null {
  if (colorOwner(legend, to, from) !== null) return null;
  const out: NodeColors = {};
  for (const [k, v] of Object.entries(legend)) out[k === from ? to : k] = v;
  return out;
}

/** The translated level name of an entry (the stored level is free text; the known ones are translated). */
function entryLabel(entry: LegendEntry): string {
  const level = entry.accuracy_level ?? "";
  const word = level.split(" ")[0];
  return word === "pass" || word === "warning" || word === "error" || word === "unmatched" ? t(word) : level;
}

export class LegendPanel {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private message: HTMLElement;

  constructor(private ctx: AppContext, private graph: GraphView) {
    this.list = el("div", { class: "ga-legend-list" });
    this.message = el("p", { class: "ga-legend-message", testid: "legend-message", hidden: true });
    this.el = el("section", { class: "ga-legend", testid: "legend" }, el("h3", { text: t("legend") }),
      el("p", { class: "ga-muted", text: t("legendHelp") }), this.list, this.message);
    ctx.store.subscribe((_s, changed) => {
      if (changed.has("colorMode")) this.render();
    });
  }

  render(): void {
    clear(this.list);
    // A build graph has no precision: its colours are the overflow levels, whatever the mode says.
    if (this.ctx.store.state.colorMode === "overflow" || this.ctx.meta()?.graph_type !== "compare") {
      for (const [level, color] of Object.entries(OVERFLOW_COLORS)) {
        this.list.append(el("div", { class: "ga-legend-item", testid: "legend-item" },
          el("span", { class: "ga-swatch", style: `background:${color}` }),
          el("span", { text: t(level as "medium") })));
      }
      return;
    }
    if (this.ctx.store.state.colorMode === "metric") {
      const m = this.graph.metricScale();
      if (m && Number.isFinite(m.scale.min)) {
        const stops = METRIC_STOPS.map((c, i) => `${c} ${Math.round((i / (METRIC_STOPS.length - 1)) * 100)}%`).join(",");
        this.list.append(el("div", { class: "ga-legend-item", testid: "legend-item" }, el("span", { text: m.metric })),
          el("div", { class: "ga-gradient", style: `background:linear-gradient(to right,${stops})` }),
          el("div", { class: "ga-row ga-muted" }, el("span", { text: formatMetric(m.scale.min) }),
            el("span", { class: "ga-spacer" }), el("span", { text: `${formatMetric(m.scale.max)} (log)` })));
      }
      return;
    }
    const legend = this.ctx.legend();
    for (const [color, entry] of Object.entries(legend)) {
      const input = el("input", { type: "color", value: color.length === 7 ? color : "#cccccc", title: color });
      input.addEventListener("change", () => void this.change(color, input.value.toUpperCase()));
      const range = entry.value && entry.value.length === 2 ? `[${entry.value[0]}, ${entry.value[1]}]` : "";
      // (grey marks an unmatched node on either pane: say so, the bench pane has its own colour for matched nodes)
      const where = !entry.value || entry.value.length === 0 ? ` (${t("legendEitherSide")})` : "";
      this.list.append(el("div", { class: "ga-legend-item", testid: "legend-item", title: entry.description ?? "" },
        input, el("span", { class: "ga-legend-label", text: `${entryLabel(entry)} ${range}${where}` })));
    }
    // The bench pane's matched nodes: no precision of their own (it is their debug twin's), so not a legend range.
    this.list.append(el("div", { class: "ga-legend-item", testid: "legend-bench-matched" },
      el("span", { class: "ga-swatch", style: `background:${this.ctx.theme().benchMatched}` }),
      el("span", { class: "ga-legend-label", text: t("legendBenchMatched") })));
  }

  private async change(from: string, to: string): Promise<void> {
    if (from === to) return;
    const legend = this.ctx.legend();
    const next = recolor(legend, from, to);
    if (!next) {
      const owner = colorOwner(legend, to, from)!;
      this.showMessage(`${t("legendColorTaken")} ${to} (${entryLabel(legend[owner])})`);
      this.render(); // puts the refused swatch back to its own colour
      return;
    }
    this.showMessage("");
    this.ctx.setLegend(next);
    this.render();
    this.graph.redraw();
    try {
      const k = this.ctx.graphKey();
      await this.ctx.api.saveLegend({ run: k.run, file: k.file }, next);
    } catch (e) {
      this.ctx.error(e);
    }
  }

  private showMessage(text: string): void {
    this.message.textContent = text;
    this.message.hidden = !text;
  }
}
