// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import { ApiError } from "../src/api/client";
import { defaultState, Store } from "../src/state/state";
import type { AppContext } from "../src/views/context";
import type { GraphView } from "../src/views/graphView";
import { MatchPanel } from "../src/views/matchPanel";

function panel(known: Set<string>) {
  const written: Record<string, string> = {};
  const api = {
    match: vi.fn(async (_k: unknown, debug: string, bench: string) => {
      if (!known.has(debug)) throw new ApiError(404, `no node named '${debug}' in this graph`);
      written[debug] = bench;
      return { changed: [] };
    }),
    matches: vi.fn(async () => ({ matches: { ...written }, unmatched: [] })),
  };
  const error = vi.fn();
  const ctx = {
    api, store: new Store(defaultState()), meta: () => ({ sides: ["NPU", "Bench"], graph_type: "compare" }), error,
    graphKey: () => ({ run: "r", file: "f.vis.db", step: 0, rank: 0 }),
  } as unknown as AppContext;
  const graph = { reloadKeepingView: vi.fn(async () => undefined) };
  return { p: new MatchPanel(ctx, graph as unknown as GraphView), written, error, graph };
}

describe("loading a .vis.config", () => {
  it("matches every valid pair past a bad one, names the bad ones, and refreshes the graph and the count", async () => {
    const { p, written, error, graph } = panel(new Set(["A.forward.0", "C.forward.0"]));
    const config = { "A.forward.0": "A.forward.0", "No.such.node": "B.forward.0", "C.forward.0": "C.forward.0",
      "D.forward.0": 3 };
    await p.loadConfigText("load_test.vis.config", JSON.stringify(config));
    expect(written).toEqual({ "A.forward.0": "A.forward.0", "C.forward.0": "C.forward.0" });
    expect(graph.reloadKeepingView).toHaveBeenCalledTimes(1);
    expect(p.el.textContent).toContain("2 manual matches");
    expect(error).toHaveBeenCalledTimes(1);
    const msg = (error.mock.calls[0][0] as Error).message;
    expect(msg).toContain("load_test.vis.config: pairs not matched (2/4)");
    expect(msg).toContain("No.such.node → B.forward.0 (no node named 'No.such.node' in this graph)");
    expect(msg).toContain("D.forward.0 → 3");
    expect(msg).not.toContain("C.forward.0");
  });

  it("a file that is not a {debug: bench} object matches nothing and says so", async () => {
    const { p, written, error, graph } = panel(new Set());
    await p.loadConfigText("x.vis.config", "[1, 2]");
    expect(written).toEqual({});
    expect(graph.reloadKeepingView).not.toHaveBeenCalled();
    expect((error.mock.calls[0][0] as Error).message).toContain("not a {debug: bench} object");
  });
});

describe("writing the edits into the database", () => {
  it("refreshes the graph and the count of manual matches, which the apply folded in", async () => {
    const { p, written, graph } = panel(new Set(["A.forward.0"]));
    await p.loadConfigText("x.vis.config", JSON.stringify({ "A.forward.0": "A.forward.0" }));
    expect(p.el.textContent).toContain("1 manual matches");
    const api = (p as unknown as { ctx: { api: Record<string, unknown> } }).ctx.api;
    api.apply = vi.fn(async () => {
      for (const k of Object.keys(written)) delete written[k];   // the server retires the side files
      return { backup: "f.vis.db.bak-1", nodes_updated: 2, legend: false, side_files: ["f_0_0.vis.config"] };
    });
    vi.spyOn(window, "confirm").mockReturnValue(true);
    const button = [...p.el.querySelectorAll("button")].find((b) => b.textContent?.includes("database"))!;
    button.click();
    await vi.waitFor(() => expect(p.el.textContent).toContain("0 manual matches"));
    expect(api.apply).toHaveBeenCalledTimes(1);
    expect(graph.reloadKeepingView).toHaveBeenCalledTimes(2);
  });
});
