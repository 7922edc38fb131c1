// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import type { AppContext } from "../src/views/context";
import { OverflowView } from "../src/views/overflowView";

function view(items: unknown[]) {
  const ctx = {
    api: { overflow: vi.fn(async () => ({ items })) },
    meta: () => ({ ranks: [0], sides: ["NPU", "Bench"] }),
    graphKey: () => ({ run: "r", file: "f.vis.db", step: 0, rank: 0 }),
    error: vi.fn(), goToNode: vi.fn(),
  } as unknown as AppContext;
  return new OverflowView(ctx);
}

const tagged = (v: OverflowView) => [...v.el.querySelectorAll(".ga-first .ga-item-name")].map((e) => e.textContent);

describe("the overflow list", () => {
  it("tags the node the server flags as where the overflow starts, not the earliest of the list", async () => {
    const v = view([{ name: "Tensor.__mul__.1.forward", overflow: "high", order: 13, first: false },
      { name: "Torch.exp.0.forward", overflow: "critical", order: 14, first: true }]);
    await v.reload();
    expect(tagged(v)).toEqual(["Torch.exp.0.forward"]);
  });

  it("tags none when no node is flagged, even in an answer without the flag (the earliest was taken)", async () => {
    for (const items of [[{ name: "Tensor.sqrt.0.forward", overflow: "high", order: 3, first: false }],
      [{ name: "Tensor.sqrt.0.forward", overflow: "high", order: 3 }]]) {
      const v = view(items);
      await v.reload();
      expect(v.el.querySelectorAll("[data-testid=overflow-item]").length).toBe(1);
      expect(tagged(v)).toEqual([]);
      // and says why the list has no start: the norm-ratio "high" nodes of a healthy optimizer read as the overflow
      expect(v.el.querySelector("[data-testid=overflow-no-start]")?.textContent).toContain("No node here");
    }
  });

  it("says what the levels mean, and no 'no start' note when a node is flagged or the list is empty", async () => {
    for (const items of [[{ name: "Torch.exp.0.forward", overflow: "critical", order: 14, first: true }], []]) {
      const v = view(items);
      await v.reload();
      expect(v.el.querySelector("[data-testid=overflow-levels]")?.textContent).toContain("critical: finite inputs");
      expect(v.el.querySelector("[data-testid=overflow-no-start]")).toBeNull();
    }
  });

  it("with no start, tags and names the node where Inf/NaN first comes in (a GradScaler's float16 cast)", async () => {
    const v = view([{ name: "Tensor.__mul__.0.backward", overflow: "high", order: 57, first: false, enters: false },
      { name: "Functional.linear.8.backward", overflow: "high", order: 59, first: false, enters: true },
      { name: "Module.head.Linear.backward.0", overflow: "high", order: 61, first: false, enters: false }]);
    await v.reload();
    expect(tagged(v)).toEqual(["Functional.linear.8.backward"]);
    expect(v.el.querySelector("[data-testid=overflow-enters]")?.textContent).toBe("Inf/NaN comes in");
    expect(v.el.querySelector("[data-testid=overflow-no-start]")?.textContent)
      .toContain("first comes in at Functional.linear.8.backward");
  });
});
