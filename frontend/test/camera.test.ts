import { describe, expect, it } from "vitest";
import { Camera, focusView, READABLE_PX } from "../src/render/camera";

describe("Camera.fit", () => {
  it("keeps the room asked for above the box (the pane's title), a small box as a big one", () => {
    const cam = new Camera();
    cam.fit(0, 0, 150, 24, 500, 400, 16, 1.25, 28);
    expect(cam.toScreen(0, 0).y).toBeGreaterThanOrEqual(28);
    cam.fit(0, 0, 5000, 20000, 800, 600, 16, 1.25, 28);
    expect(cam.toScreen(0, 0).y).toBeCloseTo(28);
    expect(cam.toScreen(0, 20000).y).toBeLessThanOrEqual(600 - 16 + 1e-6);
  });
});

describe("focusView (the view of a jump to a node)", () => {
  const shown = (v: { scale: number; tx: number; ty: number }, b: { x: number; y: number; w: number; h: number }) => ({
    x: b.x * v.scale + v.tx, y: b.y * v.scale + v.ty, w: b.w * v.scale, h: b.h * v.scale,
  });

  it("shows the target's whole row when the root fits readable (centring on the target cut the row off)", () => {
    const root = { x: 16, y: 28, w: 700, h: 900 };
    const target = { x: 40, y: 300, w: 200, h: 26 };
    const v = focusView(target, [root], 1, 540, 470, 28, null);
    const r = shown(v, root);
    expect(r.x).toBeGreaterThanOrEqual(0);
    expect(r.x + r.w).toBeLessThanOrEqual(540);
    expect(shown(v, target).h).toBeGreaterThanOrEqual(READABLE_PX);
  });

  it("falls back to the widest ancestor that fits, then to the target itself", () => {
    const root = { x: 0, y: 0, w: 50000, h: 900 };
    const parent = { x: 30000, y: 100, w: 600, h: 300 };
    const target = { x: 30100, y: 200, w: 200, h: 26 };
    const v = focusView(target, [root, parent], 1, 540, 470, 28, null);
    const p = shown(v, parent);
    expect(p.x).toBeGreaterThanOrEqual(0);
    expect(p.x + p.w).toBeLessThanOrEqual(540);
    const alone = focusView(target, [root], 1, 540, 470, 28, null);
    const t = shown(alone, target);
    expect(t.x).toBeGreaterThanOrEqual(0);
    expect(t.x + t.w).toBeLessThanOrEqual(540);
  });

  it("moves the target off the minimap's corner", () => {
    const target = { x: 800, y: 800, w: 200, h: 26 };
    // a small pane whose centre puts the target under the minimap, in the bottom-right corner
    const avoid = { x: 164, y: 124, w: 130, h: 112 };
    const centred = shown(focusView(target, [], 1, 300, 260, 28, null), target);
    expect(centred.x + centred.w > avoid.x && centred.y + centred.h > avoid.y).toBe(true);
    const v = focusView(target, [], 1, 300, 260, 28, avoid);
    const t = shown(v, target);
    const overlaps = t.x < avoid.x + avoid.w && t.x + t.w > avoid.x && t.y < avoid.y + avoid.h && t.y + t.h > avoid.y;
    expect(overlaps).toBe(false);
    expect(t.y).toBeGreaterThanOrEqual(0);
  });
});
