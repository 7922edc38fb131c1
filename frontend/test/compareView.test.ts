// @vitest-environment jsdom
import { describe, expect, it, vi } from "vitest";
import { DEFAULT_LEGEND } from "../src/render/colors";
import { defaultState, Store } from "../src/state/state";
import { CompareView } from "../src/views/compareView";
import type { AppContext } from "../src/views/context";

const TOTAL = 1200;

function ctxWithRows(): { ctx: AppContext; asked: number[] } {
  const asked: number[] = [];
  const rows = Array.from({ length: TOTAL }, (_, i) => ({ order: i, node: `Torch.op.${i}.forward`, precision: 0 }));
  const ctx = {
    api: {
      compareTable: vi.fn(async (_k: unknown, o: { offset: number; limit: number }) => {
        asked.push(o.offset);
        return { total: TOTAL, columns: ["order", "node"], rows: rows.slice(o.offset, o.offset + o.limit) };
      }),
      compareCsvUrl: () => "",
    },
    store: new Store(defaultState()), meta: () => ({ sides: ["NPU"], graph_type: "compare", tool_tip: {} }),
    graphKey: () => ({ run: ".", file: "f.vis.db", step: 0, rank: 0 }), legend: () => DEFAULT_LEGEND,
    error: vi.fn(), notice: vi.fn(), goToNode: vi.fn(async () => undefined),
  } as unknown as AppContext;
  return { ctx, asked };
}

describe("the compare table's More button", () => {
  it("adds its page to the rows already drawn, without drawing them again", async () => {
    const { ctx, asked } = ctxWithRows();
    const view = new CompareView(ctx);
    await view.reload();
    const drawn = () => [...view.el.querySelectorAll("[data-testid=compare-row]")];
    const first = drawn();
    expect(first.length).toBe(500);
    const more = [...view.el.querySelectorAll("button")].find((b) => !b.hidden && b.textContent === "More…")!;
    more.click();
    await vi.waitFor(() => expect(drawn().length).toBe(1000));
    // the first page's rows are the same elements: only the new page was made
    expect(drawn().slice(0, 500).every((tr, i) => tr === first[i])).toBe(true);
    more.click();
    await vi.waitFor(() => expect(drawn().length).toBe(TOTAL));
    expect(more.hidden).toBe(true);
    expect(asked).toEqual([0, 500, 1000]);
    expect(drawn()[TOTAL - 1].textContent).toContain(`Torch.op.${TOTAL - 1}.forward`);
  });
});
