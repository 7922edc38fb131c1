// @vitest-environment jsdom
import { beforeEach, describe, expect, it } from "vitest";
import { Minimap } from "../src/render/minimap";

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
