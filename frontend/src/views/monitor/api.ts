// Typed client of the monitor routes (docs/monitor.md). The only code of the monitor view that talks HTTP.

export type Cell = number | "nan" | "inf" | "-inf" | null;

export interface MonitorJob {
  job: string;
  ranks: number[];
  runs: Record<string, string>;
  metrics: Record<string, string[]>;
  n_modules: number;
  max_step: number;
  n_anomaly_series: number;
}

export type Mode = "step_module" | "step_rank" | "module_rank";

export interface Heatmap {
  job: string;
  metric: string;
  op: string;
  mode: Mode;
  rank?: number;
  module?: string;
  step?: number;
  rows: string[];
  ranks?: number[];
  total_rows: number;
  offset: number;
  cols: Array<[number, number] | string>;
  values: Cell[][];
}

export interface SeriesSpec {
  rank: number;
  module: string;
  metric: string;
  op: string;
}

export interface Series extends SeriesSpec {
  tag: string;
  run: string;
  points: Array<[number, Cell]>;
}

export interface AnomalyItem {
  rank: number;
  step: number;
  rule: string;
  tag: string;
  module: string;
  metric: string;
  op: string;
  value: Cell;
}

export class MonitorApi {
  constructor(private readonly base: string) {}

  private async get<T>(path: string, params: Array<[string, string | number | undefined | null]>): Promise<T> {
    const q = new URLSearchParams();
    for (const [k, v] of params) if (v !== undefined && v !== null && v !== "") q.append(k, String(v));
    const url = `${this.base}/api/monitor/${path}${q.toString() ? "?" + q.toString() : ""}`;
    const res = await fetch(url, { credentials: "same-origin" });
    let body: unknown;
    try {
      body = await res.json();
    } catch {
      throw new Error(`${res.status} ${res.statusText}`);
    }
    if (!res.ok) {
      const err = (body as { error?: string }).error;
      throw new Error(err || `${res.status} ${res.statusText}`);
    }
    return body as T;
  }

  jobs(): Promise<{ jobs: MonitorJob[] }> {
    return this.get("runs", []);
  }

  heatmap(p: {
    job: string; metric: string; op: string; mode: Mode; rank?: number; module?: string; step?: number;
    filter?: string; offset?: number; limit?: number; max_cols?: number; focus?: string;
  }): Promise<Heatmap> {
    return this.get("heatmap", Object.entries(p) as Array<[string, string | number | undefined]>);
  }

  series(job: string, specs: SeriesSpec[], points = 1000): Promise<{ series: Series[] }> {
    const params: Array<[string, string | number]> = [["job", job], ["points", points]];
    for (const s of specs) params.push(["s", `${s.rank}|${s.module}|${s.metric}|${s.op}`]);
    return this.get("series", params);
  }

  anomalies(job: string, limit = 500): Promise<{ total: number; items: AnomalyItem[] }> {
    return this.get("anomalies", [["job", job], ["limit", limit]]);
  }
}

/** A cell value as a number (non-finite strings become NaN / +-Infinity), or null when missing. */
export function num(c: Cell): number | null {
  if (c === null) return null;
  if (c === "nan") return NaN;
  if (c === "inf") return Infinity;
  if (c === "-inf") return -Infinity;
  return c;
}
