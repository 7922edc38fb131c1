// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import type { FirstDivergence, NodeDetails } from "../src/api/types";
import { DEFAULT_LEGEND } from "../src/render/colors";
import { defaultState, Store } from "../src/state/state";
import { CompareView } from "../src/views/compareView";
import type { AppContext } from "../src/views/context";
import { DetailsView } from "../src/views/details";
import { divergenceReason } from "../src/views/findings";

// The tester's case: alpha * tanh(x), alpha 1.5 against 0.5: precision 0, every row pass, the output 200 % off.
const MUL: FirstDivergence = {
  name: "Tensor.__mul__.0.forward", order: 12, precision: 0, level: "pass", path: ["DefaultModel", "Tensor.__mul__.0.forward"],
  why: { rule: "inputs_pass", flagged: false, worst_output: { metric: "NormRelativeErr", value: 200 }, inputs_match: true,
    differs: [{ key: "input.1", kind: "argument", debug: "1.5", bench: "0.5" }] },
};

function ctxWith(first: FirstDivergence | null, extra: Partial<Record<string, unknown>> = {}): AppContext {
  return {
    api: { findings: vi.fn(async () => ({ first_divergence: first, first_overflow: null })),
      compareTable: async () => ({ total: 0, columns: [], rows: [] }), compareCsvUrl: () => "" },
    store: new Store(defaultState()), meta: () => ({ sides: ["NPU"], graph_type: "compare", tool_tip: {} }),
    sideKey: (side: string) => ({ side }), graphKey: () => ({ run: ".", file: "f.vis.db", step: 0, rank: 0 }),
    legend: () => DEFAULT_LEGEND, error: vi.fn(), clearError: vi.fn(), notice: vi.fn(), goToNode: vi.fn(async () => undefined), ...extra,
  } as unknown as AppContext;
}

describe("the first divergence says why it was chosen", () => {
  it("in words: inputs match, the output's figure, what differs, why it is drawn as passing", () => {
    expect(divergenceReason(MUL)).toBe("First divergence: its inputs match the bench, its output differs "
      + "(NormRelativeErr 200 %); a parameter or argument differs: input.1 (1.5 vs 0.5); drawn as passing: the "
      + "precision rule does not flag an output when a parameter or argument differs too");
    const computed: FirstDivergence = { ...MUL, precision: 1, level: "error", why: { rule: "earliest_error",
      flagged: true, worst_output: null, inputs_match: false, differs: [{ key: "input.0", kind: "input" }] } };
    expect(divergenceReason(computed)).toBe("First divergence: the earliest error in execution order; its inputs "
      + "differ already: input.0");
  });

  it("says a warning chosen for want of an error is a warning only (a healthy bf16 run against fp32)", () => {
    const gelu: FirstDivergence = { name: "Functional.gelu.0.forward", order: 24, precision: 0.5, level: "warning",
      path: ["DefaultModel", "Functional.gelu.0.forward"], why: { rule: "inputs_pass", flagged: true,
        worst_output: { metric: "NormRelativeErr", value: 0.02534 }, inputs_match: true, differs: [], warning_only: true } };
    expect(divergenceReason(gelu)).toBe("First divergence: its inputs match the bench, its output differs "
      + "(NormRelativeErr 0.0253 %); a warning only: no node of this step is an error (the tenfold rule also warns "
      + "on rounding, as in a bf16 run against an fp32 one)");
  });

  it("when the page goes there (a notice), after showing the node", async () => {
    const ctx = ctxWith(MUL);
    const view = new CompareView(ctx);
    view.el.querySelector<HTMLButtonElement>("[data-testid=first-divergence-button]")!.click();
    await vi.waitFor(() => expect(ctx.notice).toHaveBeenCalledTimes(1));
    expect(ctx.goToNode).toHaveBeenCalledWith("NPU", "Tensor.__mul__.0.forward");
    expect((ctx.notice as ReturnType<typeof vi.fn>).mock.calls[0][0]).toBe(divergenceReason(MUL));
  });

  it("in the node details of that node only", async () => {
    const ctx = ctxWith(MUL);
    const view = new DetailsView(ctx);
    const node = (name: string) => ({ name, type: 1, precision: 0, overflow: null, inputs: [], outputs: [],
      parameters: [], stack: [], counterpart: null, path: [name] }) as unknown as NodeDetails;
    await view.show("NPU", node("Tensor.__mul__.0.forward"));
    const line = view.el.querySelector("[data-testid=details-first-divergence]");
    expect(line?.textContent).toBe(divergenceReason(MUL));
    await view.show("NPU", node("Torch.tanh.0.forward"));
    expect(view.el.querySelector("[data-testid=details-first-divergence]")).toBeNull();
  });
});
