import { describe, expect, it } from "vitest";
import { defaultState, Store } from "../src/state/state";
import { embedInParentHash, extractFromParentHash, MAX_URL_EXPANDED, queryToState, stateToQuery } from "../src/state/url";

describe("state <-> URL", () => {
  it("round-trips every field, with names that need escaping", () => {
    const s = defaultState();
    s.run = "runs/a b&c";
    s.file = "compare_1.vis.db";
    s.step = 3;
    s.rank = 7;
    s.microStep = 2;
    s.tab = "compare";
    s.selected = { side: "Bench", name: "Module.x:y.forward.0 <img src=x onerror=alert(1)>" };
    s.expanded = { NPU: ["DefaultModel", "Module.a,b.forward.0", "Ünïcode#1"], Bench: ["DefaultModel"] };
    s.colorMode = "metric";
    s.metric = "Max diff";
    s.worstInside = false;
    s.search = "linear.*=&?";
    s.regex = true;
    s.precisionFilter = ["error", "warning"];
    s.overflowFilter = ["critical"];
    s.lang = "zh";
    s.camera = { NPU: [0.125, 1234.5, -20], Bench: null };
    const q = stateToQuery(s);
    expect(q).not.toMatch(/[ <>#]/);
    expect(queryToState(q)).toEqual(s);
    expect(queryToState("#" + q)).toEqual(s);
  });

  it("writes nothing for the defaults and ignores junk", () => {
    expect(stateToQuery(defaultState())).toBe("");
    const s = queryToState("step=abc&rank=-&tab=nope&sel=Other:x&color=rainbow&lang=fr&zzz=1&zn=1,2&zb=-1,0,0");
    expect(s).toEqual(defaultState());
  });

  it("rides along in the parent's fragment without disturbing TensorBoard's own part", () => {
    const h1 = embedInParentHash("#graph_ascend", "run=a&step=2");
    expect(h1.startsWith("#graph_ascend&ga=")).toBe(true);
    expect(extractFromParentHash(h1)).toBe("run=a&step=2");
    const h2 = embedInParentHash(h1, "run=b");
    expect(h2.match(/ga=/g)!.length).toBe(1);
    expect(extractFromParentHash(h2)).toBe("run=b");
    expect(extractFromParentHash("#scalars")).toBeNull();
  });

  it("the store reports which keys changed, and nothing when nothing did", () => {
    const store = new Store(defaultState());
    const seen: string[][] = [];
    store.subscribe((_s, changed) => seen.push([...changed]));
    store.set({ step: 0 });
    store.set({ step: 1, rank: 0, expanded: { NPU: ["a"], Bench: [] } });
    expect(seen).toEqual([["step", "expanded"]]);
  });

  it("writes at most MAX_URL_EXPANDED expanded names a side, the first in pre-order (a deep path made a 500 kB URL)", () => {
    const names = Array.from({ length: 20000 }, (_, i) => `Module.d${i}.L.forward.0`);
    const q = stateToQuery({ ...defaultState(), expanded: { NPU: names, Bench: ["x"] } });
    const back = queryToState(q);
    expect(back.expanded.NPU).toEqual(names.slice(0, MAX_URL_EXPANDED));
    expect(back.expanded.Bench).toEqual(["x"]);
    expect(q.length).toBeLessThan(100_000);
  });
});
