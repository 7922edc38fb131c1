// @vitest-environment jsdom
import { describe, expect, it } from "vitest";
import { columnsInView, nextScroll, scrollBox } from "../src/views/scrollX";

describe("wide tables say they scroll (the details table ended at 'MinRelativ…' with no sign of more)", () => {
  const cols = [0, 100, 200, 300, 400].map((left) => ({ left, width: 100 }));

  it("counts the columns in view", () => {
    expect(columnsInView(cols, 0, 250)).toEqual([0, 1]);
    expect(columnsInView(cols, 200, 300)).toEqual([2, 4]);
    expect(columnsInView([{ left: 0, width: 900 }], 100, 300)).toEqual([0, 0]);
    expect(columnsInView(cols, 50, 80)).toBeNull();
  });

  it("the buttons page through every column, ending exactly at the last", () => {
    let x = 0;
    const seen = new Set<number>();
    for (let i = 0; i < 10; i++) {
      const v = columnsInView(cols, x, 250);
      if (v) for (let c = v[0]; c <= v[1]; c++) seen.add(c);
      x = nextScroll(x, 250, 500, 1);
    }
    expect(x).toBe(250);
    expect([...seen].sort()).toEqual([0, 1, 2, 3, 4]);
    expect(nextScroll(250, 250, 500, -1)).toBe(50);
    expect(nextScroll(50, 250, 500, -1)).toBe(0);
  });

  it("wraps the table under a bar with the two buttons", () => {
    const table = document.createElement("table");
    const box = scrollBox(table);
    expect(box.querySelector("[data-testid=scroll-x]")!.contains(table)).toBe(true);
    expect(box.querySelector("[data-testid=scroll-right]")).not.toBeNull();
    expect(box.querySelector("[data-testid=scroll-left]")).not.toBeNull();
  });
});
