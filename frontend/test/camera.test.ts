import { describe, expect, it } from "vitest";
import { Camera } from "../src/render/camera";

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
