// "Go to the first divergence", from the Compare tab's toolbar and the Graph tab's: this graph's own (/api/findings),
// with why it is there. A rank the difference reached through a collective has none of its own: the button goes to
// the run's first divergence (another step or rank), and says so; it said "No divergence found." there.
import type { RunFirstDivergence } from "../api/types";
import { t } from "../i18n";
import type { AppContext } from "./context";
import { divergenceReason } from "./findings";

function fillIn(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{(\w+)\}/g, (m, k: string) => (k in values ? String(values[k]) : m));
}

function elsewhere(run: RunFirstDivergence | null | undefined, step: number, rank: number): RunFirstDivergence | null {
  return run && (run.step !== step || run.rank !== rank) ? run : null;
}

/** Go to the first divergence; returns the text for the toolbar ("" once a node was reached). */
export async function goToFirstDivergence(ctx: AppContext): Promise<string> {
  const here = ctx.graphKey();
  const f = await ctx.api.findings(here);
  const d = f.first_divergence;
  const run = elsewhere(f.run_first_divergence, here.step, here.rank);
  if (d && typeof d.name === "string" && d.name) {
    await ctx.goToNode("NPU", d.name);
    const also = run ? ` ${fillIn(t("fdRunFirst"), { step: run.step, rank: run.rank, name: run.name })}` : "";
    ctx.notice(divergenceReason(d) + also);
    return "";
  }
  if (!run) return t("noDivergence");
  await ctx.goToNode("NPU", run.name, run.rank, run.step);
  const there = await ctx.api.findings(ctx.graphKey());
  const none = fillIn(t("fdNoneHere"), { step: here.step, rank: here.rank });
  ctx.notice(there.first_divergence ? `${none} ${divergenceReason(there.first_divergence)}` : none);
  return "";
}
