// @vitest-environment jsdom
import { describe, expect, it } from "vitest";
import { pickStep } from "../src/views/app";

describe("pickStep", () => {
  it("keeps a step the file has, else opens a live file on its newest step and another on its first", () => {
    expect(pickStep({ steps: [3, 4, 5], live: true }, 4, true)).toBe(4);
    expect(pickStep({ steps: [3, 4, 5], live: true }, 4, false)).toBe(5);
    expect(pickStep({ steps: [3, 4, 5], live: true }, 0, true)).toBe(5); // (a step the live graph dropped)
    expect(pickStep({ steps: [3, 4, 5], live: false }, 0, true)).toBe(3);
    expect(pickStep({ steps: [3, 4, 5] }, 4, false)).toBe(3);
    expect(pickStep({ steps: [], live: true }, 2, true)).toBe(0);
  });
});
