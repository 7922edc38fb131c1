import { describe, expect, it } from "vitest";
import { ApiClient, ApiError, baseFromModuleUrl, buildPath, decodeCompact } from "../src/api/client";

describe("api client URLs", () => {
  it("are relative and escape every value", () => {
    const p = buildPath("children", { run: "a b/c", file: "x&y.vis.db", node: "<img src=x onerror=alert(1)>#1?",
      step: 0, rank: 2, micro_step: undefined, regex: true });
    expect(p.startsWith("api/children?")).toBe(true);
    expect(p).not.toContain("micro_step");
    expect(p).not.toMatch(/[<> #]/);
    const q = new URLSearchParams(p.split("?")[1]);
    expect(q.get("node")).toBe("<img src=x onerror=alert(1)>#1?");
    expect(q.get("run")).toBe("a b/c");
    expect(q.get("file")).toBe("x&y.vis.db");
    expect(q.get("step")).toBe("0");
    expect(q.get("regex")).toBe("1");
  });

  it("join lists with commas and leave empty lists out", () => {
    const q = new URLSearchParams(buildPath("filter", { precision: ["error", "warning"], overflow: [] }).split("?")[1]);
    expect(q.get("precision")).toBe("error,warning");
    expect(q.has("overflow")).toBe(false);
  });

  it("resolve under the plugin prefix, including TensorBoard's --path_prefix", () => {
    const base = baseFromModuleUrl("http://h:6006/my/prefix/data/plugin/graph_ascend/index.js");
    expect(base).toBe("http://h:6006/my/prefix/data/plugin/graph_ascend/");
    const api = new ApiClient(base);
    expect(api.url("runs")).toBe("http://h:6006/my/prefix/data/plugin/graph_ascend/api/runs");
    expect(api.url("node", { node: "a/../b" })).toBe(
      "http://h:6006/my/prefix/data/plugin/graph_ascend/api/node?node=a%2F..%2Fb");
  });

  it("turns the server's {error} into an ApiError with its sentence", async () => {
    const calls: string[] = [];
    const api = new ApiClient("http://h/p/", async (url) => {
      calls.push(url);
      return new Response(JSON.stringify({ error: "unknown node 'x'" }), { status: 404 });
    });
    await expect(api.node({ run: ".", file: "f", step: 0, rank: 0, side: "NPU" }, "x")).rejects.toMatchObject({
      status: 404, message: "unknown node 'x'",
    });
    expect(calls[0]).toBe("http://h/p/api/node?run=.&file=f&step=0&rank=0&side=NPU&node=x");
  });

  it("caches read-only graph reads but not failures", async () => {
    let n = 0;
    const api = new ApiClient("http://h/", async () => {
      n++;
      return n === 1 ? new Response("oops", { status: 500 })
        : new Response(JSON.stringify({ node: "r", total: 0, offset: 0, children: [] }));
    });
    const k = { run: ".", file: "f", step: 0, rank: 0, side: "NPU" as const };
    await expect(api.children(k, "r")).rejects.toBeInstanceOf(ApiError);
    await api.children(k, "r");
    await api.children(k, "r");
    expect(n).toBe(2);
  });

  it("POSTs JSON to the same relative route", async () => {
    let seen: { url: string; init?: RequestInit } | null = null;
    const api = new ApiClient("http://h/p/", async (url, init) => {
      seen = { url, init };
      return new Response(JSON.stringify({ changed: [] }));
    });
    await api.match({ run: ".", file: "f", step: 0, rank: 0 }, "a", "b", true);
    expect(seen!.url).toBe("http://h/p/api/match");
    expect(seen!.init!.method).toBe("POST");
    expect((seen!.init!.headers as Record<string, string>)["Content-Type"]).toBe("application/json");
    expect(JSON.parse(String(seen!.init!.body))).toEqual({ run: ".", file: "f", step: 0, rank: 0, debug: "a",
      bench: "b", descendants: true });
  });

  it("follows paging to get every child", async () => {
    const all = Array.from({ length: 120000 }, (_, i) => i);
    const api = new ApiClient("http://h/", async (url) => {
      const q = new URL(url).searchParams;
      const off = Number(q.get("offset"));
      const lim = Number(q.get("limit"));
      const children = all.slice(off, off + lim).map((i) => ({ name: `n${i}` }));
      return new Response(JSON.stringify({ node: "r", total: all.length, offset: off, children }));
    });
    const r = await api.allChildren({ run: ".", file: "f", step: 0, rank: 0, side: "NPU" }, "r");
    expect(r.children.length).toBe(120000);
    expect(r.children[119999].name).toBe("n119999");
  });

  it("counts requests in flight (the test hooks' ready flag waits for 0)", async () => {
    let release: (r: Response) => void = () => undefined;
    const api = new ApiClient("http://h/", () => new Promise<Response>((r) => (release = r)));
    const p = api.runs();
    expect(api.inflight).toBe(1);
    release(new Response(JSON.stringify({ runs: [] })));
    await p;
    expect(api.inflight).toBe(0);
  });
});

describe("decodeCompact", () => {
  it("rebuilds the object form, defaults for the fields left out", () => {
    const out = decodeCompact({ name: ["a", "b"], type: [0, 1], n_children: [3, 0], order: [7, 8] });
    expect(out).toEqual([
      { name: "a", type: 0, n_children: 3, precision: null, overflow: null, subtree_precision: null,
        subtree_overflow: null, matched: true, micro_step: 0, order: 7 },
      { name: "b", type: 1, n_children: 0, precision: null, overflow: null, subtree_precision: null,
        subtree_overflow: null, matched: true, micro_step: 0, order: 8 },
    ]);
  });
  it("decodes levels, flags, nulls and manual positions", () => {
    const [a, b] = decodeCompact({ name: ["a", "b"], type: [0, 1], n_children: [3, 0], order: [7, 8],
      precision: [0.5, null], subtree_precision: [1, null], overflow: [0, 3], subtree_overflow: [2, 3],
      matched: [1, 0], micro_step: [0, 2], manual: [1] });
    expect([a.precision, a.overflow, a.subtree_overflow, a.matched, a.manual]).toEqual([0.5, null, "high", true, undefined]);
    expect([b.precision, b.overflow, b.subtree_precision, b.matched, b.micro_step, b.manual])
      .toEqual([null, "critical", null, false, 2, true]);
  });
  it("childrenCompact asks for compact=1 and returns summaries", async () => {
    const seen: string[] = [];
    const api = new ApiClient("http://h/p/", async (url: string) => {
      seen.push(url);
      return new Response(JSON.stringify({ node: "r", total: 5, offset: 2,
        compact: { name: ["x"], type: [1], n_children: [0], order: [4] } }));
    });
    const r = await api.childrenCompact({ run: ".", file: "f", step: 0, rank: 0, side: "NPU" }, "r", -1, 2, 1);
    expect(seen[0]).toContain("compact=1");
    expect(r.total).toBe(5);
    expect(r.children[0].name).toBe("x");
    expect(r.children[0].matched).toBe(true);
  });
});

describe("partial answers", () => {
  it("are used once and not cached, complete ones are cached", async () => {
    let calls = 0;
    const api = new ApiClient("http://h/p/", async () => {
      calls++;
      const partial = calls < 3;
      return new Response(JSON.stringify({ name: "DefaultModel", type: 0, n_children: 1, precision: null,
        overflow: null, subtree_precision: partial ? null : 0.5, subtree_overflow: null, matched: true,
        micro_step: 0, order: 0, ...(partial ? { partial: true } : {}) }));
    });
    const k = { run: ".", file: "f", step: 0, rank: 0, side: "NPU" as const };
    expect((await api.root(k)).partial).toBe(true);
    await new Promise((r) => setTimeout(r, 0));
    expect((await api.root(k)).partial).toBe(true);
    await new Promise((r) => setTimeout(r, 0));
    const done = await api.root(k);
    expect(done.partial).toBeUndefined();
    expect(done.subtree_precision).toBe(0.5);
    await api.root(k);
    expect(calls).toBe(3);
  });
});
