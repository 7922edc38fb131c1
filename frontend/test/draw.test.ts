import { describe, expect, it } from "vitest";
import { expand, makeNode, setChildren, type LayoutNode } from "../src/layout/tree";
import { Camera } from "../src/render/camera";
import { LIGHT } from "../src/render/colors";
import { drawTree, labelText, shorten, type Paint } from "../src/render/draw";
import { summary } from "./helpers";

/** A 2D context that records what would be drawn. */
function recorder() {
  const calls = { rect: 0, fill: 0, fillText: [] as string[], strokeRect: 0, fillRect: 0 };
  const ctx = {
    fillStyle: "", strokeStyle: "", lineWidth: 1, font: "", textBaseline: "",
    fillRect: () => calls.fillRect++, beginPath: () => undefined, rect: () => calls.rect++,
    fill: () => calls.fill++, stroke: () => undefined, strokeRect: () => calls.strokeRect++,
    fillText: (t: string) => calls.fillText.push(t), measureText: (t: string) => ({ width: t.length * 7 }),
  };
  return { ctx: ctx as unknown as CanvasRenderingContext2D, calls };
}

function bigTree(n: number): LayoutNode {
  const root = makeNode(summary("root", n), null, 0);
  setChildren(root, Array.from({ length: n }, (_, i) => summary(`Functional.linear.${i}.forward`, 0,
    { precision: i % 97 === 0 ? 1 : 0 })));
  expand(root);
  return root;
}

const paint: Paint = {
  fill: (n) => (n.summary.precision === 1 ? "#FF704D" : "#FFFCF3"), badge: () => null, selected: null,
  counterpart: null, highlighted: new Set(), theme: LIGHT,
};

describe("canvas drawing levels of detail", () => {
  it("zoomed out: boxes only, no labels, and neighbours of one colour merged into few rectangles", () => {
    const root = bigTree(20000);
    const cam = new Camera();
    cam.fit(0, 0, root.w, root.h, 1200, 800);
    const { ctx, calls } = recorder();
    const stats = drawTree(ctx, root, cam, 1200, 800, paint);
    expect(stats.visited).toBe(20001);
    expect(calls.fillText.length).toBe(0);
    expect(calls.rect).toBeLessThan(20000 / 4); // merged runs, not one rectangle per box
  });

  it("zoomed in: only what is on screen is visited, and its labels are drawn", () => {
    const root = bigTree(20000);
    const cam = new Camera();
    cam.scale = 1;
    cam.tx = -500;
    cam.ty = -3000;
    const { ctx, calls } = recorder();
    const stats = drawTree(ctx, root, cam, 1200, 800, paint);
    expect(stats.visited).toBeLessThan(300);
    expect(stats.labels).toBeGreaterThan(20);
    expect(calls.fillText.length).toBe(stats.labels);
    expect(calls.fillText.some((t) => t.includes("linear"))).toBe(true);
  });

  it("shortens long names in the middle after dropping the shared prefix", () => {
    expect(shorten("Module.layers.1.fc.Linear.forward.0", 100)).toBe("Module.layers.1.fc.Linear.forward.0");
    const s = shorten("Module.layers.11.attention.dense.Linear.forward.0", 20);
    expect(s.length).toBe(20);
    expect(s.startsWith("layers.")).toBe(true);
    expect(s.endsWith("forward.0")).toBe(true);
  });
});

describe("label shortening", () => {
  it("siblings are shortened alike: a name that just fits loses the prefix its longer siblings lose", () => {
    const names = ["Module.embed.Linear.forward.0", "Module.layers.0.Block.forward.0", "Module.head.Linear.forward.0",
      "Module.head.Linear.backward.0"];
    const root = makeNode(summary("DefaultModel", names.length), null, 0);
    setChildren(root, names.map((n) => summary(n)));
    expand(root);
    const cam = new Camera();
    cam.scale = 1;
    const { ctx, calls } = recorder();
    drawTree(ctx, root, cam, 1200, 800, paint);
    const shown = calls.fillText.filter((t) => !t.startsWith("DefaultModel"));
    expect(shown).toHaveLength(4);
    // at 7 px a character, a 220 px box holds 28: "Module.head.Linear.forward.0" fits, its siblings do not
    expect(shown).toContain("head.Linear.forward.0");
    expect(shown.filter((t) => t.startsWith("Module."))).toEqual([]);
    // and where every sibling fits, every name is shown whole
    expect(labelText("Module.head.Linear.forward.0", 40, 31)).toBe("Module.head.Linear.forward.0");
    expect(labelText("Module.head.Linear.forward.0", 30, 31)).toBe("head.Linear.forward.0");
  });
});
