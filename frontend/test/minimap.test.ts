// @vitest-environment jsdom
import { beforeEach, describe, expect, it } from "vitest";
import { Minimap, MINIMAP_H, MINIMAP_W, minimapRect } from "../src/render/minimap";

describe("the minimap does not hide the pane's labels for good", () => {
  beforeEach(() => window.localStorage.clear());

  it("has a button that hides it (and shows it again), remembered for the next pane", () => {
    const m = new Minimap("minimap", () => undefined);
    expect(m.el.contains(m.canvas) && m.el.contains(m.toggle)).toBe(true);
    expect(m.hidden).toBe(false);
    m.toggle.click();
    expect(m.hidden).toBe(true);
    expect(m.canvas.hidden).toBe(true);
    expect(m.toggle.getAttribute("aria-pressed")).toBe("false");
    expect(new Minimap("minimap-Bench", () => undefined).hidden).toBe(true);
    m.toggle.click();
    expect(m.canvas.hidden).toBe(false);
    expect(new Minimap("minimap", () => undefined).hidden).toBe(false);
  });
});

describe("the minimap keeps out of the way", () => {
  beforeEach(() => window.localStorage.clear());

  it("is small, and a pane too small for it hides it, button and all, until the pane grows", () => {
    const m = new Minimap("minimap", () => undefined);
    expect(MINIMAP_W * MINIMAP_H).toBeLessThanOrEqual(128 * 88); // (160 x 110 covered a row of a 540 x 470 pane)
    expect(m.shownIn(540, 470)).toBe(true);
    m.fitPane(300, 200);
    expect(m.el.hidden).toBe(true);
    expect(m.shownIn(300, 200)).toBe(false);
    m.fitPane(540, 470);
    expect(m.el.hidden).toBe(false);
    m.setHidden(true);
    expect(m.shownIn(540, 470)).toBe(false);
  });

  it("its rectangle is the pane's bottom-right corner, the button above it included", () => {
    const r = minimapRect(540, 470);
    expect(r.x + r.w).toBeLessThan(540);
    expect(r.y + r.h).toBeLessThan(470);
    expect(r.w).toBeGreaterThanOrEqual(MINIMAP_W);
    expect(r.h).toBeGreaterThan(MINIMAP_H);
  });
});
