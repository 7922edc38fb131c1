// @vitest-environment jsdom
import { describe, expect, it } from "vitest";
import { compareCells, el, numeric } from "../src/views/dom";
import { isCompareField, pairParams, paramColumns } from "../src/views/details";
import { sortableTable } from "../src/views/table";
import { visConfigName } from "../src/views/matchPanel";
import { recolor } from "../src/views/legendPanel";

describe("DOM helpers", () => {
  it("put text in as text, never as markup", () => {
    const evil = "<img src=x onerror=alert(1)>";
    const e = el("div", { text: evil }, el("span", {}, evil));
    expect(e.querySelector("img")).toBeNull();
    expect(e.textContent).toBe(evil + evil);
  });

  it("numbers parse from the stored strings (percent, exponent, inf) and sort numerically", () => {
    expect(numeric("12.5%")).toBe(12.5);
    expect(numeric("1e-3")).toBe(0.001);
    expect(numeric("-inf")).toBe(-Infinity);
    expect(numeric("N/A")).toBeNaN();
    expect(numeric("[3, 8]")).toBeNaN();
    const v = ["10", "9", "1e-5", "abc", "-2", "100%"];
    expect([...v].sort(compareCells)).toEqual(["-2", "1e-5", "9", "10", "100%", "abc"]);
  });
});

describe("node details tables", () => {
  const debug = [
    { key: "A.forward.0.input.0", fields: { Max: "2.5", Min: "-1", "Max diff": "0.5", MaxRelativeErr: "20%" } },
    { key: "A.forward.0.output.0", fields: { Max: "10", Min: "0", "Max diff": "0.01", MaxRelativeErr: "0.1%" } },
  ];
  const bench = [
    { key: "B.forward.0.output.0", fields: { Max: "9.99", Min: "0" } },
    { key: "B.forward.0.input.0", fields: { Max: "2", Min: "-1" } },
  ];

  it("pairs debug and bench parameters by their suffix", () => {
    const rows = pairParams("A.forward.0", debug, "B.forward.0", bench);
    expect(rows.map((r) => [r.param, r.bench?.fields.Max])).toEqual([["input.0", "2"], ["output.0", "9.99"]]);
  });

  it("has debug, bench and difference columns with metric tooltips, sorted numerically on click", () => {
    const rows = pairParams("A.forward.0", debug, "B.forward.0", bench);
    const cols = paramColumns(rows, { "Max diff": "max of debug minus bench" }, true);
    const keys = cols.map((c) => c.key);
    expect(keys).toEqual(["param", "d:Max", "b:Max", "c:Max diff", "c:MaxRelativeErr", "d:Min", "b:Min"]);
    expect(cols.find((c) => c.key === "c:Max diff")!.title).toBe("max of debug minus bench");
    const table = sortableTable(cols, rows);
    const th = [...table.querySelectorAll("th")].find((h) => h.dataset.key === "c:MaxRelativeErr")!;
    th.click();
    const firstCol = () => [...table.querySelectorAll("tbody tr")].map((tr) => tr.children[0].textContent);
    expect(firstCol()).toEqual(["output.0", "input.0"]);
    th.click();
    expect(firstCol()).toEqual(["input.0", "output.0"]);
    expect(isCompareField("Cosine", {})).toBe(true);
    expect(isCompareField("Max", {})).toBe(false);
  });

  it("side-file names follow the reference", () => {
    expect(visConfigName("compare_20261130025840.vis.db", 0, 1)).toBe("compare_20261130025840_0_1.vis.config");
    const l = recolor({ "#111111": { value: [0, 1] }, "#222222": { value: [] } }, "#111111", "#ABCDEF");
    expect(Object.keys(l ?? {})).toEqual(["#ABCDEF", "#222222"]);
  });
});

describe("compare dashboard columns", () => {
  it("puts identity, then comparison results, then raw statistics; hides data_name", async () => {
    const { orderColumns } = await import("../src/views/compareView");
    const cols = ["node", "order", "precision", "io", "key", "type", "dtype", "Max", "Min", "data_name", "Max diff",
      "MaxRelativeErr", "Result"];
    expect(orderColumns(cols, { "Max diff": "tip" })).toEqual(["node", "order", "precision", "io", "key", "Max diff",
      "MaxRelativeErr", "Result", "type", "dtype", "Max", "Min"]);
  });
});

describe("counterpart navigation", () => {
  it("reveals the counterpart by its link only when the link leads to it", async () => {
    const { counterpartPath } = await import("../src/views/graphView");
    const path = ["DefaultModel", "Module.blocks.1.Block.forward.0", "Module.blocks.1.attn.Attention.forward.0"];
    expect(counterpartPath({ counterpart: path[2], matched_node_link: path })).toEqual(path);
    // a link left over from the partner a manual match replaced
    const stale = ["DefaultModel", "Module.blocks.1.Block.forward.0", "Module.blocks.1.mlp.MLP.forward.0"];
    expect(counterpartPath({ counterpart: path[2], matched_node_link: stale })).toBeNull();
    expect(counterpartPath({ counterpart: null, matched_node_link: stale })).toBeNull();
  });
});
