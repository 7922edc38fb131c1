import { describe, expect, it } from "vitest";
import { absPos, expand, hitTest, makeNode, setChildren } from "../src/layout/tree";
import { Camera } from "../src/render/camera";
import { summary } from "./helpers";

function build() {
  const root = makeNode(summary("root", 40), null, 0);
  setChildren(root, Array.from({ length: 40 }, (_, i) => summary(`c${i}`, i === 9 ? 2 : 0)));
  expand(root);
  const c9 = root.children![9];
  setChildren(c9, [summary("c9.a"), summary("c9.b")]);
  expand(c9);
  return root;
}

describe("hit testing", () => {
  it("finds the deepest node under a point", () => {
    const root = build();
    for (const name of ["c0", "c17", "c39", "c9.a", "c9.b"]) {
      const n = [...root.children!, ...root.children![9].children!].find((c) => c.name === name)!;
      const p = absPos(n);
      expect(hitTest(root, p.x + n.w / 2, p.y + n.h / 2)?.name).toBe(name);
      expect(hitTest(root, p.x + 1, p.y + 1)?.name).toBe(name);
    }
  });

  it("a point on an expanded node's header or in a gap hits that node, outside hits nothing", () => {
    const root = build();
    const c9 = root.children![9];
    const p = absPos(c9);
    expect(hitTest(root, p.x + 3, p.y + 3)?.name).toBe("c9");
    expect(hitTest(root, 2, 2)?.name).toBe("root");
    expect(hitTest(root, -5, 10)).toBeNull();
    expect(hitTest(root, root.w + 10, 10)).toBeNull();
  });

  it("works through the camera at any zoom (screen -> world)", () => {
    const root = build();
    const cam = new Camera();
    cam.zoomAt(100, 100, 0.37);
    cam.tx += 55;
    const n = root.children![25];
    const p = absPos(n);
    const s = cam.toScreen(p.x + n.w / 2, p.y + n.h / 2);
    const w = cam.toWorld(s.x, s.y);
    expect(hitTest(root, w.x, w.y)?.name).toBe("c25");
  });
});

describe("camera", () => {
  it("zooms around the cursor: the world point under it stays put", () => {
    const cam = new Camera();
    cam.tx = 30;
    cam.ty = -40;
    const before = cam.toWorld(200, 150);
    cam.zoomAt(200, 150, 2.5);
    const after = cam.toWorld(200, 150);
    expect(after.x).toBeCloseTo(before.x);
    expect(after.y).toBeCloseTo(before.y);
    expect(cam.scale).toBeCloseTo(2.5);
  });

  it("fit shows the whole box inside the viewport", () => {
    const cam = new Camera();
    cam.fit(0, 0, 5000, 20000, 800, 600);
    const tl = cam.toScreen(0, 0);
    const br = cam.toScreen(5000, 20000);
    expect(tl.x).toBeGreaterThanOrEqual(0);
    expect(tl.y).toBeGreaterThanOrEqual(0);
    expect(br.x).toBeLessThanOrEqual(800);
    expect(br.y).toBeLessThanOrEqual(600);
  });
});
