import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Meta } from "../src/api/types";
import { LIVE_IDLE_POLL_MS, LIVE_POLL_MS, LivePoller, liveDelay, mergeLiveMeta, type PollResult } from "../src/views/live";

const META: Meta = {
  graph_type: "build", task: "summary", steps: [0, 1], ranks: [0], micro_steps: 1, overflow_check: false,
  sides: ["NPU"], node_colors: {}, tool_tip: {}, writer: "tbprobe", schema_version: 1, live: true,
};

describe("mergeLiveMeta", () => {
  it("takes a Bench side or a rank that appears later, and the end of live", () => {
    expect(mergeLiveMeta(META, { ...META }).changed).toBe(false);
    const bench = mergeLiveMeta(META, { ...META, graph_type: "compare", sides: ["NPU", "Bench"] });
    expect(bench.changed && bench.sidesChanged).toBe(true);
    expect(bench.meta.sides).toEqual(["NPU", "Bench"]);
    expect(bench.meta.graph_type).toBe("compare");
    const rank = mergeLiveMeta(META, { ...META, ranks: [0, 1] });
    expect([rank.changed, rank.sidesChanged, rank.meta.ranks]).toEqual([true, false, [0, 1]]);
    const ended = mergeLiveMeta(META, { ...META, live: false });
    expect([ended.changed, ended.meta.live]).toEqual([true, false]);
    expect(mergeLiveMeta(META, { ...META, steps: [1, 2] }).meta.steps).toEqual([1, 2]);
  });
});

describe("LivePoller", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("polls every 3 s while the file changes, every 30 s after a minute without a change", async () => {
    expect(liveDelay(0)).toBe(LIVE_POLL_MS);
    let answer: PollResult = "same";
    const times: number[] = [];
    const start = Date.now();
    const poller = new LivePoller(async () => {
      times.push(Date.now() - start);
      return answer;
    });
    poller.start();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(times.length).toBe(20);                                    // 3 s, 6 s, ... 60 s
    await vi.advanceTimersByTimeAsync(4 * LIVE_IDLE_POLL_MS);
    expect(times.length).toBe(24);                                    // then every 30 s
    expect(times.slice(-2)[1] - times.slice(-2)[0]).toBe(LIVE_IDLE_POLL_MS);
    answer = "changed";                                               // the file changes again: 3 s again
    await vi.advanceTimersByTimeAsync(LIVE_IDLE_POLL_MS);
    answer = "same";
    const before = times.length;
    await vi.advanceTimersByTimeAsync(9_000);
    expect(times.length - before).toBe(3);
    poller.stop();
  });

  it("stops when a poll says the file is no longer live, or on stop(), a poll in flight included", async () => {
    let calls = 0;
    const ended = new LivePoller(async () => (++calls >= 2 ? "stop" : "same"));
    ended.start();
    await vi.advanceTimersByTimeAsync(10 * LIVE_IDLE_POLL_MS);
    expect(calls).toBe(2);
    expect(ended.running).toBe(false);

    let release: (r: PollResult) => void = () => undefined;
    let slow = 0;
    const stopped = new LivePoller(() => new Promise<PollResult>((resolve) => { slow++; release = resolve; }));
    stopped.start();
    await vi.advanceTimersByTimeAsync(LIVE_POLL_MS);
    stopped.stop();
    release("changed");
    await vi.advanceTimersByTimeAsync(10 * LIVE_IDLE_POLL_MS);
    expect(slow).toBe(1);
  });
});
