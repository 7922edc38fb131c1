// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import type { Findings, FirstDivergence } from "../src/api/types";
import type { AppContext } from "../src/views/context";
import { goToFirstDivergence } from "../src/views/firstDivergence";
import { divergenceReason } from "../src/views/findings";

// The multi-rank tester's case: rank 2 diverges at step 1; rank 3 gets the difference through an all_reduce and has
// no first divergence of its own. The button said "No divergence found." there.
const LINEAR: FirstDivergence = {
  name: "Functional.linear.6.forward", order: 47, precision: 1, level: "error", path: ["DefaultModel", "Functional.linear.6.forward"],
  why: { rule: "earliest_error", flagged: true, worst_output: null, inputs_match: true, differs: [] },
};
const RUN = { step: 1, rank: 2, name: LINEAR.name, exec_order: 47 };

function ctxOn(byGraph: Record<string, Findings>, step = 1, rank = 3): AppContext {
  const key = { run: ".", file: "f.vis.db", step, rank };
  return {
    api: { findings: vi.fn(async (k: { step: number; rank: number }) => byGraph[`${k.step}/${k.rank}`]) },
    graphKey: () => ({ ...key }),
    notice: vi.fn(),
    goToNode: vi.fn(async (_side: string, _name: string, r?: number, s?: number) => {
      if (r !== undefined) key.rank = r;
      if (s !== undefined) key.step = s;
    }),
  } as unknown as AppContext;
}

describe("go to the first divergence", () => {
  it("goes to the run's first on a rank with none of its own, and says why", async () => {
    const ctx = ctxOn({
      "1/3": { first_divergence: null, first_overflow: null, run_first_divergence: RUN },
      "1/2": { first_divergence: LINEAR, first_overflow: null, run_first_divergence: RUN },
    });
    expect(await goToFirstDivergence(ctx)).toBe("");
    expect(ctx.goToNode).toHaveBeenCalledWith("NPU", LINEAR.name, 2, 1);
    const said = (ctx.notice as ReturnType<typeof vi.fn>).mock.calls[0][0] as string;
    expect(said).toBe("No divergence starts at step 1 rank 3 (a difference there came in from another rank): this is "
      + `the run's first. ${divergenceReason(LINEAR)}`);
  });

  it("goes to this rank's own, and names the run's first when it is elsewhere", async () => {
    const own: FirstDivergence = { ...LINEAR, name: "Distributed.all_reduce.1.forward" };
    const ctx = ctxOn({ "1/3": { first_divergence: own, first_overflow: null, run_first_divergence: RUN } });
    await goToFirstDivergence(ctx);
    expect(ctx.goToNode).toHaveBeenCalledWith("NPU", own.name);
    expect((ctx.notice as ReturnType<typeof vi.fn>).mock.calls[0][0]).toBe(
      `${divergenceReason(own)} The run's first divergence is at step 1 rank 2: ${LINEAR.name}.`);
  });

  it("says there is none when the run has none (or the file does not say: msprobe's)", async () => {
    for (const run of [null, undefined]) {
      const ctx = ctxOn({ "1/3": { first_divergence: null, first_overflow: null, run_first_divergence: run } });
      expect(await goToFirstDivergence(ctx)).toBe("No divergence found.");
      expect(ctx.goToNode).not.toHaveBeenCalled();
    }
  });
});
