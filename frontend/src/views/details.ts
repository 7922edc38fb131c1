// Node details: inputs, outputs and parameters with debug, bench and difference columns (numeric sorting,
// tooltips from tb_config.tool_tip), the data flow (which records made the inputs, which read the outputs) and
// distributed peers as links, the stack with a copy button.
import type { DataFlow, FirstDivergence, FlowLink, NodeColors, NodeDetails, Param, Side } from "../api/types";
import { t, type MessageKey } from "../i18n";
import { clear, copyText, el } from "./dom";
import type { AppContext } from "./context";
import { divergenceReason } from "./findings";
import { precisionClass } from "./format";
import { legendColor } from "../render/colors";
import { scrollBox } from "./scrollX";
import { sortableTable, type Column } from "./table";

/** Fields that come from the comparison itself (shown once, as the "difference" columns). */
const COMPARE_FIELD = /diff|err|result|cosine|rmse|relative|consistent|euc|abs|accuracy|ratio|md5 compare/i;
const HIDDEN = new Set(["data_name", "type"]);
const STAT_FIELDS = ["Max", "Min", "Mean", "Norm"];
/** The verdict and its reason: first, beside the name, where they are seen without scrolling ("dtype of NPU
 * differs" sat at the far right of a wide table). */
const VERDICT_FIELDS = ["Result", "Err_message"];
const TYPE_KEYS: Record<number, MessageKey> = { 0: "typeModule", 1: "typeApi", 8: "typeFused", 9: "typeApiCollection" };

export function isCompareField(name: string, toolTip: Record<string, string>): boolean {
  return name in toolTip || COMPARE_FIELD.test(name);
}

/** "Mod.fwd.0.input.1" -> "input.1": the part that pairs a debug parameter with its bench twin. */
export function paramSuffix(node: string, key: string): string {
  return key.startsWith(node + ".") ? key.slice(node.length + 1) : key;
}

interface Row {
  param: string;
  debug: Param;
  bench: Param | null;
}

/** Pair debug params with bench params by suffix, falling back to position (what the reference does). */
export function pairParams(debugNode: string, debug: Param[], benchNode: string | null, bench: Param[]): Row[] {
  const bySuffix = new Map(bench.map((p) => [paramSuffix(benchNode ?? "", p.key), p]));
  return debug.map((p, i) => {
    const suffix = paramSuffix(debugNode, p.key);
    return { param: suffix, debug: p, bench: bySuffix.get(suffix) ?? bench[i] ?? null };
  });
}

export function paramColumns(rows: Row[], toolTip: Record<string, string>, withBench: boolean): Column<Row>[] {
  const own: string[] = [];
  const cmp: string[] = [];
  for (const r of rows) {
    for (const f of Object.keys(r.debug.fields)) {
      if (HIDDEN.has(f)) continue;
      const list = isCompareField(f, toolTip) ? cmp : own;
      if (!list.includes(f)) list.push(f);
    }
  }
  // The verdict and its message first, then a non-tensor argument's value, then the statistics, each as debug |
  // bench | its differences ("Max", "Max diff", "MaxRelativeErr"), then the other comparison results, then
  // descriptive fields (dtype, shape, ...) that rarely differ.
  const stats = own.filter((f) => STAT_FIELDS.includes(f));
  const rest = own.filter((f) => !STAT_FIELDS.includes(f) && f !== "value");
  const cols: Column<Row>[] = [{ key: "param", label: "", value: (r) => r.param, className: "ga-param" }];
  const usedCmp = new Set<string>();
  const pushOwn = (f: string) => {
    cols.push({ key: `d:${f}`, label: withBench ? `${f} (${t("debug")})` : f, title: toolTip[f],
      value: (r) => ownValue(r.debug.fields, f) });
    if (withBench) {
      cols.push({ key: `b:${f}`, label: `${f} (${t("bench")})`, title: toolTip[f],
        value: (r) => (r.bench ? ownValue(r.bench.fields, f) : undefined) });
    }
  };
  const pushCmp = (f: string) => {
    usedCmp.add(f);
    cols.push({ key: `c:${f}`, label: f, title: toolTip[f] ?? `${t("diff")}: ${f}`, value: (r) => r.debug.fields[f],
      className: "ga-diff" });
  };
  for (const f of VERDICT_FIELDS) if (cmp.includes(f)) pushCmp(f);
  if (own.includes("value")) pushOwn("value");
  for (const f of stats) {
    pushOwn(f);
    for (const c of cmp) if (!usedCmp.has(c) && c.startsWith(f)) pushCmp(c);
  }
  for (const c of cmp) if (!usedCmp.has(c)) pushCmp(c);
  for (const f of rest) pushOwn(f);
  return cols;
}

/** A field of one side's item for its own column: a non-tensor argument's statistics are its value again ("tanh"
 * in Max, Min, Mean and Norm): shown once, in the value column. */
function ownValue(fields: Param["fields"], f: string): unknown {
  const v = fields[f];
  if (STAT_FIELDS.includes(f) && fields.value !== undefined && fields.value !== null && String(v) === String(fields.value)) {
    return undefined;
  }
  return v;
}

/** "pass (0)", "warning (0.5)", "error (1)": the legend's class of a precision index, with the number. */
export function precisionLabel(p: number, legend: NodeColors): string {
  const entry = legend[legendColor(p, legend, true) ?? ""];
  const level = String(entry?.accuracy_level ?? "").toLowerCase();
  const cls = level === "pass" || level === "warning" || level === "error" ? level : precisionClass(p);
  return `${t(cls as "pass")} (${p})`;
}

export class DetailsView {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private seq = 0;

  constructor(private ctx: AppContext) {
    this.body = el("div", { class: "ga-details-body" });
    this.el = el("section", { class: "ga-details", testid: "node-details" },
      el("h3", { text: t("nodeDetails") }), this.body);
    this.body.append(el("p", { class: "ga-muted", text: t("noSelection") }));
  }

  clear(): void {
    this.seq++;
    clear(this.body);
    this.body.append(el("p", { class: "ga-muted", text: t("noSelection") }));
  }

  async show(side: Side, d: NodeDetails): Promise<void> {
    const seq = ++this.seq;
    const meta = this.ctx.meta();
    const toolTip = meta?.tool_tip ?? {};
    const other: Side = side === "NPU" ? "Bench" : "NPU";
    let twin: NodeDetails | null = null;
    if (d.counterpart && d.counterpart_data) {
      // The server sends the other side's values with the node: no second request.
      twin = { ...d, name: d.counterpart, counterpart: d.name, ...d.counterpart_data };
    } else if (d.counterpart && meta?.sides.includes(other)) {
      try {
        twin = await this.ctx.api.node(this.ctx.sideKey(other), d.counterpart);
      } catch {
        twin = null;
      }
    }
    // The graph's first divergence (cached per graph): its panel says why it was chosen.
    let first: FirstDivergence | null = null;
    if (side === "NPU" && meta?.graph_type === "compare") {
      try {
        first = (await this.ctx.api.findings(this.ctx.graphKey())).first_divergence;
      } catch {
        first = null;
      }
    }
    if (seq !== this.seq) return;
    clear(this.body);
    const head = el("div", { class: "ga-details-head" },
      el("div", { class: "ga-node-name", text: d.name }),
      el("div", { class: "ga-muted", text: `${t("type")}: ${TYPE_KEYS[d.type] ? t(TYPE_KEYS[d.type]) : d.type}` +
        (d.precision !== null ? ` · ${t("precision")}: ${precisionLabel(d.precision, this.ctx.legend())}` : "") +
        (d.overflow ? ` · ${t("overflow")}: ${t(d.overflow)}` : "") }));
    if (d.counterpart) {
      const link = el("a", { href: "#", class: "ga-link", text: d.counterpart });
      link.addEventListener("click", (ev) => {
        ev.preventDefault();
        void this.ctx.goToNode(other, d.counterpart!);
      });
      head.append(el("div", {}, `${t("counterpart")}: `, link));
    }
    if (first && first.name === d.name) {
      head.append(el("div", { class: "ga-first-divergence", testid: "details-first-divergence",
        text: divergenceReason(first) }));
    }
    if (d.dump_data_dir) head.append(el("div", { class: "ga-muted", text: `${t("dumpDir")}: ${d.dump_data_dir}` }));
    this.body.append(head);
    // Debug values are on the NPU side; when the bench node is selected, show it in the bench column.
    const debugD = side === "NPU" ? d : twin;
    const benchD = side === "NPU" ? twin : d;
    const sections: [string, "inputs" | "outputs" | "parameters", string][] = [
      [t("inputs"), "inputs", "details-inputs"], [t("outputs"), "outputs", "details-outputs"],
      [t("parameters"), "parameters", "details-parameters"],
    ];
    for (const [label, field, testid] of sections) {
      const primary = debugD ?? d;
      const rows = pairParams(primary.name, primary[field] ?? [], benchD && benchD !== primary ? benchD.name : null,
        benchD && benchD !== primary ? benchD[field] ?? [] : []);
      const box = el("div", { class: "ga-details-section", testid },
        el("h4", { text: `${label} (${rows.length})` }));
      if (rows.length) {
        const withBench = !!benchD && benchD !== primary;
        box.append(scrollBox(sortableTable(paramColumns(rows, toolTip, withBench), rows)));
      }
      this.body.append(box);
    }
    const flow = d.data_flow ? this.flowSection(side, d.data_flow) : null;
    if (flow) this.body.append(flow);
    this.body.append(this.stackSection(d.stack ?? []));
    const peers = this.peerLinks(side, d);
    if (peers) this.body.append(peers);
  }

  private stackSection(stack: string[]): HTMLElement {
    const copyBtn = el("button", { class: "ga-small", testid: "copy-stack", text: t("copy") });
    copyBtn.addEventListener("click", async () => {
      const ok = await copyText(stack.join("\n"));
      copyBtn.textContent = ok ? t("copied") : t("copy");
      setTimeout(() => (copyBtn.textContent = t("copy")), 1500);
    });
    const pre = el("pre", { class: "ga-stack", text: stack.join("\n") });
    return el("div", { class: "ga-details-section", testid: "details-stack" },
      el("h4", {}, `${t("stack")} (${stack.length}) `, copyBtn), pre);
  }

  /** The records that made this node's inputs (by input slot) and the ones that read its outputs, each a link
   * that selects that node: where a bad value came from is one click away. */
  private flowSection(side: Side, flow: DataFlow): HTMLElement | null {
    if (!flow.fed_by.length && !flow.feeds.length) return null;
    const link = (l: FlowLink, testid: string): HTMLElement => {
      const a = el("a", { href: "#", class: "ga-link", testid, text: l.node });
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        void this.ctx.goToNode(side, l.node);
      });
      // a producer by this node's input slot it fills; a consumer with the slot of its own it is read into
      return testid === "flow-producer" ? el("div", {}, `${t("inputSlot")} ${l.slot} ← `, a)
        : el("div", {}, a, ` (${t("inputSlot")} ${l.slot})`);
    };
    const box = el("div", { class: "ga-details-section", testid: "details-flow" }, el("h4", { text: t("dataFlow") }));
    if (flow.fed_by.length) {
      box.append(el("div", { class: "ga-muted", text: t("fedBy") }));
      for (const l of flow.fed_by) box.append(link(l, "flow-producer"));
    }
    if (flow.feeds.length) {
      box.append(el("div", { class: "ga-muted", text: t("feeds") }));
      for (const l of flow.feeds) box.append(link(l, "flow-consumer"));
      if (flow.feeds_truncated) box.append(el("div", { class: "ga-muted", text: `… ${t("moreFeeds")}` }));
    }
    return box;
  }

  private peerLinks(side: Side, d: NodeDetails): HTMLElement | null {
    const info = d.distributed?.nodes_info;
    if (!info || typeof info !== "object") return null;
    const box = el("div", { class: "ga-details-section" }, el("h4", {
      text: `${t("peers")}${d.distributed?.communications_type ? ` (${d.distributed.communications_type})` : ""}` }));
    for (const [rank, value] of Object.entries(info)) {
      const list = Array.isArray(value) ? value : [value];
      const name = String(list[list.length - 1] ?? "");
      const r = parseInt(rank, 10);
      if (!name || Number.isNaN(r)) continue;
      const a = el("a", { href: "#", class: "ga-link", testid: "details-peer", text: `${t("rank")} ${r}: ${name}` });
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        void this.ctx.goToNode(side, name, r);
      });
      box.append(el("div", {}, a));
    }
    return box;
  }
}
