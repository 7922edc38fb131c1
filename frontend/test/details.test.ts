// @vitest-environment jsdom
import { describe, expect, it } from "vitest";
import type { NodeColors, Param } from "../src/api/types";
import { DEFAULT_LEGEND } from "../src/render/colors";
import { pairParams, paramColumns, precisionLabel } from "../src/views/details";
import { sortableTable } from "../src/views/table";

describe("node details cosmetics", () => {
  it("the header names the precision's class, not only its number", () => {
    expect(precisionLabel(0, DEFAULT_LEGEND)).toBe("pass (0)");
    expect(precisionLabel(0.5, DEFAULT_LEGEND)).toBe("warning (0.5)");
    expect(precisionLabel(1, DEFAULT_LEGEND)).toBe("error (1)");
    // by the file's legend when it has other ranges
    const strict: NodeColors = { ...DEFAULT_LEGEND,
      "#FFFCF3": { value: [0, 0.1], description: "pass", accuracy_level: "pass" },
      "#FFDC7F": { value: [0.1, 0.6], description: "warning", accuracy_level: "warning" } };
    expect(precisionLabel(0.2, strict)).toBe("warning (0.2)");
  });

  it("Result and Err_message come first, beside the name, and a string argument is shown once", () => {
    const debug: Param[] = [
      { key: "F.gelu.0.forward.input.0", fields: { type: "torch.Tensor", dtype: "torch.float16", Max: 2.5, Min: -1,
        Mean: 0.1, Norm: 3, "Max diff": 0.5, NormRelativeErr: "1%", Result: "error",
        Err_message: '["dtype of NPU differs"]', shape: "[4]" } },
      { key: "F.gelu.0.forward.input.approximate", fields: { type: "str", value: "tanh", Max: "tanh", Min: "tanh",
        Mean: "tanh", Norm: "tanh", "Max diff": "N/A", Result: "pass", Err_message: "[]", shape: "[]" } },
    ];
    const bench: Param[] = [
      { key: "F.gelu.0.forward.input.0", fields: { type: "torch.Tensor", dtype: "torch.float32", Max: 2, Min: -1,
        Mean: 0.1, Norm: 3, shape: "[4]" } },
      { key: "F.gelu.0.forward.input.approximate", fields: { type: "str", value: "tanh", Max: "tanh", Min: "tanh",
        Mean: "tanh", Norm: "tanh", shape: "[]" } },
    ];
    const rows = pairParams("F.gelu.0.forward", debug, "F.gelu.0.forward", bench);
    const cols = paramColumns(rows, {}, true);
    expect(cols.map((c) => c.key).slice(0, 5)).toEqual(["param", "c:Result", "c:Err_message", "d:value", "b:value"]);
    const table = sortableTable(cols, rows);
    const cells = [...table.querySelectorAll("tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent));
    const arg = cells.find((c) => c[0] === "input.approximate")!;
    expect(arg.filter((c) => c === "tanh")).toHaveLength(2);       // debug and bench value, once each
    expect(cells.find((c) => c[0] === "input.0")!.slice(1, 3)).toEqual(["error", '["dtype of NPU differs"]']);
  });
});
