// The typed client of docs/http_api.md: the only code that talks HTTP. Every URL is built relative to the
// plugin's own prefix (the folder index.js was loaded from), so it works under TensorBoard's --path_prefix.
import type {
  ChildrenResponse, CompactChildren, CompactChildrenResponse, CompareTableResponse, DepthChildrenResponse, Findings, ListResponse, Meta, NodeColors, NodeDetails, NodeSummary,
  OverflowItem, OverflowLevel, PathChildrenResponse, RunsResponse, Side,
} from "./types";

export interface FileKey { run: string; file: string }
export interface GraphKey extends FileKey { step: number; rank: number }
export interface SideKey extends GraphKey { side: Side }

const LEVELS: readonly (OverflowLevel | null)[] = [null, "medium", "high", "critical"];

/** The object form of a compact child list (docs/http_api.md, `compact=1`): a field left out has its default. */
export function decodeCompact(c: CompactChildren): NodeSummary[] {
  const n = c.name.length;
  const out: NodeSummary[] = new Array(n);
  const { precision, subtree_precision: sp, overflow, subtree_overflow: so, matched, micro_step: micro } = c;
  for (let i = 0; i < n; i++) {
    out[i] = {
      name: c.name[i], type: c.type[i], n_children: c.n_children[i],
      precision: precision ? precision[i] : null,
      overflow: overflow ? LEVELS[overflow[i]] ?? null : null,
      subtree_precision: sp ? sp[i] : null,
      subtree_overflow: so ? LEVELS[so[i]] ?? null : null,
      matched: matched ? matched[i] === 1 : true,
      micro_step: micro ? micro[i] : 0,
      order: c.order[i],
    };
  }
  for (const i of c.manual ?? []) if (out[i]) out[i].manual = true;
  return out;
}

/**
 * The children `start` to `end` of a compact list (positions in `manual` made relative to `start`; `manual`: those
 * positions when the caller has them already).
 */
export function sliceCompact(c: CompactChildren, start: number, end: number, manualHere?: number[]): CompactChildren {
  const out: CompactChildren = {
    name: c.name.slice(start, end), type: c.type.slice(start, end), n_children: c.n_children.slice(start, end),
    order: c.order.slice(start, end),
  };
  if (c.precision) out.precision = c.precision.slice(start, end);
  if (c.subtree_precision) out.subtree_precision = c.subtree_precision.slice(start, end);
  if (c.overflow) out.overflow = c.overflow.slice(start, end);
  if (c.subtree_overflow) out.subtree_overflow = c.subtree_overflow.slice(start, end);
  if (c.matched) out.matched = c.matched.slice(start, end);
  if (c.micro_step) out.micro_step = c.micro_step.slice(start, end);
  const manual = manualHere ?? (c.manual ?? []).filter((i) => i >= start && i < end).map((i) => i - start);
  if (manual.length) out.manual = manual;
  return out;
}

export type Params = Record<string, string | number | boolean | null | undefined | readonly string[]>;

/** An HTTP error with the server's one-sentence message. */
export class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
    this.name = "ApiError";
  }
}

/** "api/children?run=...&node=..." : relative, every value percent-escaped, empty values left out. */
export function buildPath(route: string, params: Params = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    if (Array.isArray(v)) {
      if (v.length) q.set(k, v.join(","));
    } else if (typeof v === "boolean") {
      q.set(k, v ? "1" : "0");
    } else {
      q.set(k, String(v));
    }
  }
  const qs = q.toString();
  return `api/${route}${qs ? "?" + qs : ""}`;
}

/** The plugin's base URL from the module URL: ".../data/plugin/graph_ascend/index.js" -> ".../graph_ascend/". */
export function baseFromModuleUrl(moduleUrl: string): string {
  return new URL(".", moduleUrl).href;
}

type FetchFn = (input: string, init?: RequestInit) => Promise<Response>;

export class ApiClient {
  private readonly fetchFn: FetchFn;
  /** Read-only responses that never change for the same file (children, node) are cached per request URL. */
  private readonly cache = new Map<string, Promise<unknown>>();
  /** requests not answered yet (the page is "ready" for tests only when this is 0) */
  inflight = 0;

  constructor(readonly base: string, fetchFn?: FetchFn) {
    this.fetchFn = fetchFn ?? ((i, init) => fetch(i, init));
  }

  url(route: string, params: Params = {}): string {
    return new URL(buildPath(route, params), this.base).href;
  }

  /** Forget cached reads (after a write, or when the file list changes). */
  clearCache(): void {
    this.cache.clear();
  }

  private async request<T>(url: string, init?: RequestInit): Promise<T> {
    let resp: Response;
    let text: string;
    this.inflight++;
    try {
      resp = await this.fetchFn(url, init);
      text = await resp.text();
    } catch (e) {
      throw new ApiError(0, `network error: ${(e as Error).message}`);
    } finally {
      this.inflight--;
    }
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = null;
    }
    if (!resp.ok) {
      const msg = body && typeof body === "object" && "error" in body ? String((body as { error: unknown }).error)
        : `HTTP ${resp.status}`;
      throw new ApiError(resp.status, msg);
    }
    if (body === null && text) throw new ApiError(resp.status, "the server sent something that is not JSON");
    return body as T;
  }

  get<T>(route: string, params: Params = {}, cached = false): Promise<T> {
    const url = this.url(route, params);
    if (!cached) return this.request<T>(url);
    let p = this.cache.get(url) as Promise<T> | undefined;
    if (!p) {
      p = this.request<T>(url);
      this.cache.set(url, p);
      // A partial answer (the server's index was not ready) is used once, then asked for again.
      p.then((body) => {
        if (body && typeof body === "object" && (body as { partial?: boolean }).partial) this.cache.delete(url);
      }, () => this.cache.delete(url));
    }
    return p;
  }

  post<T>(route: string, body: unknown): Promise<T> {
    return this.request<T>(this.url(route), {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
  }

  runs(): Promise<RunsResponse> {
    return this.get("runs");
  }
  meta(k: FileKey): Promise<Meta> {
    return this.get("meta", { run: k.run, file: k.file });
  }
  root(k: SideKey): Promise<NodeSummary> {
    return this.get("root", { ...k }, true);
  }
  children(k: SideKey, node: string, microStep = -1, offset = 0, limit = 5000): Promise<ChildrenResponse> {
    return this.get("children", { ...k, node, micro_step: microStep >= 0 ? microStep : undefined, offset, limit },
      true);
  }
  private compactParams(k: SideKey, node: string, microStep: number, offset: number, limit: number): Params {
    return { ...k, node, micro_step: microStep >= 0 ? microStep : undefined, offset, limit, compact: 1 };
  }

  /** Like children(), in the compact form on the wire (about a quarter of the bytes and of the server's time). */
  async childrenCompact(k: SideKey, node: string, microStep = -1, offset = 0, limit = 5000):
    Promise<ChildrenResponse> {
    const r = await this.get<CompactChildrenResponse>("children", this.compactParams(k, node, microStep, offset, limit),
      true);
    return { node: r.node, total: r.total, offset: r.offset, children: decodeCompact(r.compact), partial: r.partial };
  }

  /**
   * The first `limit` children of every ancestor of `node` in one request (/api/path_children), put in the cache
   * as the answers childrenCompact(k, ancestor, microStep, 0, limit) would get: opening a path then asks nothing
   * more (it asked once per level, one after the other: minutes for a node 20,000 levels deep). Returns how many
   * levels it cached; the levels the server left out are asked for one by one as before.
   */
  async prefetchPath(k: SideKey, node: string, microStep: number, limit: number): Promise<number> {
    const r = await this.get<PathChildrenResponse>("path_children", { ...k, node,
      micro_step: microStep >= 0 ? microStep : undefined, limit });
    this.cachePages(k, microStep, limit, r);
    return r.levels.length;
  }

  /** The children pages an expand to `depth` opens (at most `maxNodes` nodes), into the cache in one request as
   * prefetchPath; returns whether the server stopped at maxNodes. */
  async prefetchDepth(k: SideKey, depth: number, microStep: number, limit: number, maxNodes: number): Promise<boolean> {
    const r = await this.get<DepthChildrenResponse>("depth_children", { ...k, depth,
      micro_step: microStep >= 0 ? microStep : undefined, limit, max_nodes: maxNodes });
    this.cachePages(k, microStep, limit, r);
    return r.capped;
  }

  /** Each level of a path_children / depth_children answer as the /api/children page it stands for. */
  private cachePages(k: SideKey, microStep: number, limit: number,
    r: { levels: { node: string; total: number; count: number }[]; compact: CompactChildren }): void {
    const manual = [...(r.compact.manual ?? [])].sort((a, b) => a - b);
    let start = 0;
    let m = 0;
    for (const level of r.levels) {
      const end = start + level.count;
      const here: number[] = [];
      for (; m < manual.length && manual[m] < end; m++) if (manual[m] >= start) here.push(manual[m] - start);
      const url = this.url("children", this.compactParams(k, level.node, microStep, 0, limit));
      const page: CompactChildrenResponse = { node: level.node, total: level.total, offset: 0,
        compact: sliceCompact(r.compact, start, end, here) };
      start = end;
      if (!this.cache.has(url)) this.cache.set(url, Promise.resolve(page));
    }
  }
  /** Every direct child, following the server's paging. */
  async allChildren(k: SideKey, node: string, microStep = -1): Promise<ChildrenResponse> {
    const first = await this.children(k, node, microStep, 0, 50000);
    let children = first.children;
    while (children.length < first.total) {
      const next = await this.children(k, node, microStep, children.length, 50000);
      if (!next.children.length) break;
      children = children.concat(next.children);
    }
    return { ...first, children };
  }
  node(k: SideKey, node: string): Promise<NodeDetails> {
    return this.get("node", { ...k, node }, true);
  }
  search(k: SideKey, q: string, regex: boolean, offset = 0, limit = 100): Promise<ListResponse> {
    return this.get("search", { ...k, q, regex, offset, limit });
  }
  filter(k: SideKey, opts: { precision?: string[]; overflow?: string[]; sort?: string; desc?: boolean;
    offset?: number; limit?: number; metric?: string }): Promise<ListResponse> {
    return this.get("filter", { ...k, ...opts });
  }
  /**
   * Every filtered item (for the metric colouring), following the server's paging (at most 50000 a page). With
   * `metric`, each item carries that metric only (much cheaper for the server on big graphs).
   */
  async allFiltered(k: SideKey, opts: { precision?: string[]; overflow?: string[]; metric?: string } = {}):
    Promise<ListResponse> {
    const first = await this.filter(k, { ...opts, limit: 50000 });
    let items = first.items;
    while (items.length < first.total) {
      const next = await this.filter(k, { ...opts, offset: items.length, limit: 50000 });
      if (!next.items.length) break;
      items = items.concat(next.items);
    }
    return { total: first.total, items };
  }
  compareTable(k: GraphKey, opts: Params): Promise<CompareTableResponse> {
    return this.get("compare_table", { ...k, ...opts });
  }
  compareCsvUrl(k: GraphKey, opts: Params): string {
    return this.url("compare_table", { ...k, ...opts, format: "csv" });
  }
  /** (cached: the node details ask for it on every selection, to say so when it is the first divergence) */
  findings(k: GraphKey): Promise<Findings> {
    return this.get("findings", { ...k }, true);
  }
  overflow(k: GraphKey): Promise<{ items: OverflowItem[] }> {
    return this.get("overflow", { ...k });
  }
  matches(k: GraphKey): Promise<{ file?: string; matches: Record<string, string>; unmatched?: string[] }> {
    return this.get("matches", { ...k });
  }
  match(k: GraphKey, debug: string, bench: string, descendants: boolean): Promise<{ changed: NodeSummary[] }> {
    return this.post("match", { ...k, debug, bench, descendants });
  }
  unmatch(k: GraphKey, debug: string, descendants: boolean): Promise<{ changed: NodeSummary[] }> {
    return this.post("unmatch", { ...k, debug, descendants });
  }
  legend(k: FileKey): Promise<{ node_colors: NodeColors }> {
    return this.get("legend", { ...k });
  }
  saveLegend(k: FileKey, nodeColors: NodeColors): Promise<unknown> {
    return this.post("legend", { ...k, node_colors: nodeColors });
  }
  apply(k: FileKey): Promise<unknown> {
    return this.post("apply", { ...k });
  }
}
