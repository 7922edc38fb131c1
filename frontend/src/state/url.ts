// ViewState <-> a URL fragment "k=v&k=v" (URLSearchParams escaping). Only what differs from the defaults is
// written, so links stay short; unknown or malformed values fall back to the defaults instead of failing.
import type { Side } from "../api/types";
import { defaultState, type ColorMode, type Lang, type Tab, type ViewState } from "./state";

const TABS: Tab[] = ["graph", "compare", "overflow", "monitor"];
const MODES: ColorMode[] = ["legend", "overflow", "metric"];
const LIST_SEP = "\n"; // node names may hold commas; they never hold newlines
/**
 * Expanded nodes written to the URL, per side: the first ones in pre-order (every node's ancestors come before it,
 * so what is written is still a tree). The path of a node 20,000 levels deep made a URL of half a megabyte, written
 * again on every change; the selection's own path is opened again from the selection.
 */
export const MAX_URL_EXPANDED = 2000;

function int(v: string | null, dflt: number): number {
  if (v === null || !/^-?\d+$/.test(v)) return dflt;
  return parseInt(v, 10);
}

function list(v: string | null): string[] {
  return v ? v.split(LIST_SEP).filter((x) => x.length > 0) : [];
}

export function stateToQuery(s: ViewState): string {
  const d = defaultState();
  const q = new URLSearchParams();
  if (s.run) q.set("run", s.run);
  if (s.file) q.set("file", s.file);
  if (s.step !== d.step) q.set("step", String(s.step));
  if (s.rank !== d.rank) q.set("rank", String(s.rank));
  if (s.microStep !== d.microStep) q.set("ms", String(s.microStep));
  if (s.tab !== d.tab) q.set("tab", s.tab);
  if (s.selected) q.set("sel", `${s.selected.side}:${s.selected.name}`);
  if (s.expanded.NPU.length) q.set("xn", s.expanded.NPU.slice(0, MAX_URL_EXPANDED).join(LIST_SEP));
  if (s.expanded.Bench.length) q.set("xb", s.expanded.Bench.slice(0, MAX_URL_EXPANDED).join(LIST_SEP));
  if (s.colorMode !== d.colorMode) q.set("color", s.colorMode);
  if (s.metric) q.set("metric", s.metric);
  if (!s.worstInside) q.set("worst", "0");
  if (s.search) q.set("q", s.search);
  if (s.regex) q.set("re", "1");
  if (s.precisionFilter.length) q.set("pf", s.precisionFilter.join(","));
  if (s.overflowFilter.length) q.set("of", s.overflowFilter.join(","));
  if (s.lang !== d.lang) q.set("lang", s.lang);
  const cam = (c: [number, number, number]) => c.map((v) => +v.toPrecision(6)).join(",");
  if (s.camera.NPU) q.set("zn", cam(s.camera.NPU));
  if (s.camera.Bench) q.set("zb", cam(s.camera.Bench));
  return q.toString();
}

export function queryToState(query: string, base: ViewState = defaultState()): ViewState {
  const q = new URLSearchParams(query.replace(/^[#?]/, ""));
  const s: ViewState = { ...base, expanded: { NPU: [...base.expanded.NPU], Bench: [...base.expanded.Bench] },
    camera: { ...base.camera } };
  const str = (k: string): string | null => q.get(k);
  if (str("run") !== null) s.run = str("run")!;
  if (str("file") !== null) s.file = str("file")!;
  s.step = int(str("step"), s.step);
  s.rank = int(str("rank"), s.rank);
  s.microStep = int(str("ms"), s.microStep);
  const tab = str("tab") as Tab | null;
  if (tab && TABS.includes(tab)) s.tab = tab;
  const sel = str("sel");
  if (sel) {
    const i = sel.indexOf(":");
    const side = sel.slice(0, i) as Side;
    if (i > 0 && (side === "NPU" || side === "Bench")) s.selected = { side, name: sel.slice(i + 1) };
  }
  if (q.has("xn")) s.expanded.NPU = list(str("xn"));
  if (q.has("xb")) s.expanded.Bench = list(str("xb"));
  const color = str("color") as ColorMode | null;
  if (color && MODES.includes(color)) s.colorMode = color;
  if (str("metric") !== null) s.metric = str("metric")!;
  if (str("worst") !== null) s.worstInside = str("worst") !== "0";
  if (str("q") !== null) s.search = str("q")!;
  if (str("re") !== null) s.regex = str("re") === "1";
  if (str("pf") !== null) s.precisionFilter = str("pf")!.split(",").filter(Boolean);
  if (str("of") !== null) s.overflowFilter = str("of")!.split(",").filter(Boolean);
  const lang = str("lang") as Lang | null;
  if (lang === "en" || lang === "zh") s.lang = lang;
  s.camera = { ...base.camera };
  for (const [k, side] of [["zn", "NPU"], ["zb", "Bench"]] as const) {
    const v = str(k)?.split(",").map(Number);
    if (v && v.length === 3 && v.every(Number.isFinite) && v[0] > 0) s.camera[side] = [v[0], v[1], v[2]];
  }
  return s;
}

/** The parent TensorBoard page keeps its own fragment ("#graph_ascend"); our state rides along as "&ga=...". */
export const PARENT_KEY = "ga";

export function embedInParentHash(parentHash: string, query: string): string {
  const h = parentHash.replace(/^#/, "");
  const parts = h ? h.split("&").filter((p) => !p.startsWith(PARENT_KEY + "=")) : [];
  if (query) parts.push(`${PARENT_KEY}=${encodeURIComponent(query)}`);
  return "#" + parts.join("&");
}

export function extractFromParentHash(parentHash: string): string | null {
  for (const p of parentHash.replace(/^#/, "").split("&")) {
    if (p.startsWith(PARENT_KEY + "=")) {
      try {
        return decodeURIComponent(p.slice(PARENT_KEY.length + 1));
      } catch {
        return null;
      }
    }
  }
  return null;
}
