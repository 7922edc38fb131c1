// Why the first divergence is where it is, in words (the page went to a node drawn as passing with no word why):
// from /api/findings' `why` (docs/http_api.md).
import type { DivergenceWhy, FirstDivergence } from "../api/types";
import { type MessageKey, t } from "../i18n";
import { formatMetric } from "./format";

function worstText(w: DivergenceWhy["worst_output"]): string {
  if (!w || w.value === null || w.value === undefined) return "";
  const v = w.value;
  // NormRelativeErr comes in percent ("200.0%" in the rows)
  const shown = w.metric.endsWith("RelativeErr") && typeof v === "number" ? `${formatMetric(v)} %` : formatMetric(v);
  return `${w.metric} ${shown}`;
}

// how the graph builder chose the node -> its sentence (a rule it does not know: read off inputs_match)
const RULE_TEXT: Record<string, MessageKey> = {
  inputs_pass: "fdInputsPass",
  difference_enters: "fdEnters",
  earliest_error: "fdEarliestError",
  earliest_warning: "fdEarliestWarning",
  earliest_diverging: "fdEarliestDiverging",
};

function fill(template: string, worst: string): string {
  // (without a figure, the bracket that would hold it goes: "(output: {worst})", "（{worst}）")
  return worst ? template.replace("{worst}", worst)
    : template.replace(/\s?[（(][^()（）]*\{worst\}[)）]/, "").replace("{worst}", "");
}

/** "First divergence: its inputs match the bench, its output differs (NormRelativeErr 200 %); a parameter or
 * argument differs: parameters.weight; ..." */
export function divergenceReason(f: FirstDivergence): string {
  const why = f.why;
  if (!why) return `${t("fdPrefix")}: ${f.name}`;
  const worst = worstText(why.worst_output);
  const parts: string[] = [];
  const key = (why.rule && RULE_TEXT[why.rule]) || (why.inputs_match ? "fdInputsPass" : "fdOutputDiffers");
  parts.push(fill(t(key), worst));
  // (a bf16 run against an fp32 one: the tenfold rule warns on rounding, which read as a divergence)
  if (why.warning_only) parts.push(t("fdWarningOnly"));
  const own = why.differs.filter((d) => d.kind !== "input").map((d) => {
    if (d.kind === "argument" && d.debug !== undefined && d.debug !== null) {
      return `${d.key} (${String(d.debug)} ${t("fdVersus")} ${d.bench === undefined || d.bench === null ? "—" : String(d.bench)})`;
    }
    return d.kind === "leaf" ? `${d.key} (${t("fdLeaf")})` : d.key;
  });
  if (own.length) parts.push(`${t("fdDiffers")}: ${own.join(", ")}`);
  const carried = why.differs.filter((d) => d.kind === "input").map((d) => d.key);
  if (carried.length) parts.push(`${t("fdInputsDiffer")}: ${carried.join(", ")}`);
  if (!why.flagged) parts.push(own.length ? t("fdNotFlagged") : t("fdNotFlaggedBare"));
  return `${t("fdPrefix")}: ${parts.join("; ")}`;
}
