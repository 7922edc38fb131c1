// Types of docs/http_api.md, one to one. Keep in step with that document.

export type Side = "NPU" | "Bench";
export const SIDES: readonly Side[] = ["NPU", "Bench"];

export type OverflowLevel = "medium" | "high" | "critical";

export interface NodeSummary {
  name: string;
  type: number;
  n_children: number;
  precision: number | null;
  overflow: OverflowLevel | null;
  subtree_precision: number | null;
  subtree_overflow: OverflowLevel | null;
  matched: boolean;
  manual?: boolean;
  micro_step: number;
  order: number;
  /** only in the "changed" list of a manual match */
  side?: Side;
  /** set on a root answered before the server's index of the graph was ready (no subtree roll-ups yet) */
  partial?: boolean;
}

export interface RunFile {
  file: string;
  format: "db" | "vis";
  graph_type: "build" | "compare" | null;
  error?: string;
  size: number;
  mtime: number;
}

export interface RunsResponse {
  runs: { run: string; files: RunFile[] }[];
}

export interface LegendEntry {
  value: number[];
  description?: string;
  accuracy_level?: string;
}
export type NodeColors = Record<string, LegendEntry>;

export interface Meta {
  graph_type: "build" | "compare";
  task: string;
  steps: number[];
  ranks: number[];
  micro_steps: number;
  overflow_check: boolean;
  sides: Side[];
  node_colors: NodeColors;
  tool_tip: Record<string, string>;
  writer: string;
  schema_version: number | null;
  /** written by the collector while training runs: steps are added and old ones dropped (the page re-reads them) */
  live?: boolean;
}

export interface ChildrenResponse {
  node: string;
  total: number;
  offset: number;
  children: NodeSummary[];
  /** answered before the server's index was ready: subtree roll-ups are null; ask again later */
  partial?: boolean;
}

/** `/api/children?compact=1`: one array per field; a field left out has its default for every child. */
export interface CompactChildren {
  name: string[];
  type: number[];
  n_children: number[];
  order: number[];
  precision?: (number | null)[];
  subtree_precision?: (number | null)[];
  /** 0 none, 1 medium, 2 high, 3 critical */
  overflow?: number[];
  subtree_overflow?: number[];
  /** 0 or 1 */
  matched?: number[];
  micro_step?: number[];
  /** positions of the children a side-file edit changed */
  manual?: number[];
}

export interface CompactChildrenResponse {
  node: string;
  total: number;
  offset: number;
  compact: CompactChildren;
  partial?: boolean;
}

/** `/api/path_children`: the first page of the children of every ancestor of a node, root first, in one answer. */
export interface PathChildrenResponse {
  path: string[];
  /** one per ancestor (the node itself has none), in path order; `count` children of each in `compact`, in turn */
  levels: { node: string; total: number; count: number }[];
  compact: CompactChildren;
  /** false when the server left out the deepest levels (too many children in all): ask /api/children for them */
  complete: boolean;
}

/** /api/depth_children: the first page of every node an expand to depth opens, breadth first (as path_children) */
export interface DepthChildrenResponse {
  levels: { node: string; total: number; count: number }[];
  compact: CompactChildren;
  complete: boolean;
  /** more nodes would open than max_nodes: the levels stop there */
  capped: boolean;
}

export interface Param {
  key: string;
  fields: Record<string, string | number | null>;
}

export interface Distributed {
  communications_type?: string;
  nodes_info?: Record<string, unknown[]>;
  [k: string]: unknown;
}

export interface NodeDetails {
  name: string;
  type: number;
  parent: string | null;
  path: string[];
  precision: number | null;
  overflow: OverflowLevel | null;
  subtree_precision: number | null;
  micro_step: number;
  inputs: Param[];
  outputs: Param[];
  parameters: Param[];
  stack: string[];
  matched_node_link: string[];
  counterpart: string | null;
  counterpart_data?: { inputs: Param[]; outputs: Param[]; parameters: Param[] } | null;
  distributed: Distributed | null;
  dump_data_dir: string | null;
  /** The collector's data flow (tbprobe_edges): null where the file holds none (the reference's files). */
  data_flow?: DataFlow | null;
}

export interface FlowLink {
  /** The input slot of the consumer ("0", or "0.1" for a list argument's second tensor). */
  slot: string;
  node: string;
}

export interface DataFlow {
  fed_by: FlowLink[];
  feeds: FlowLink[];
  feeds_truncated: boolean;
}

export type MetricValue = number | string;

export interface ListItem {
  name: string;
  path?: string[];
  type: number;
  precision: number | null;
  overflow: OverflowLevel | null;
  /** the node's worst output figure of each metric, signed as stored; NaN and infinities as "nan", "inf", "-inf" */
  metrics?: Record<string, MetricValue>;
}

export interface ListResponse {
  total: number;
  items: ListItem[];
}

export interface OverflowItem {
  name: string;
  overflow: OverflowLevel;
  order: number;
  /** where the overflow starts (the graph builder's first overflow); false on every item when none is critical */
  first: boolean;
  /** with no start: where Inf/NaN first comes in, made by a call the dump does not record (older servers: absent) */
  enters?: boolean;
}

export type Row = Record<string, unknown>;

export interface CompareTableResponse {
  total: number;
  columns?: string[];
  rows?: Row[];
  items?: Row[];
}

/** Why the first divergence was chosen (docs/http_api.md, /api/findings). */
export interface DivergenceWhy {
  /** how the graph builder chose it; null for files written before it said */
  rule: "inputs_pass" | "difference_enters" | "earliest_error" | "earliest_warning" | "earliest_diverging" | null;
  /** whether the node's own precision is an error (false: drawn as passing) */
  flagged: boolean;
  worst_output: { metric: string; value: MetricValue | null } | null;
  /** every tensor input passes (parameters and non-tensor arguments aside) */
  inputs_match: boolean | null;
  differs: { key: string; kind: "parameter" | "argument" | "leaf" | "input"; debug?: unknown; bench?: unknown }[];
  /** a warning chosen because no node of that step is an error (older servers leave it out) */
  warning_only?: boolean;
}

export interface FirstDivergence {
  name: string;
  order: number;
  precision: number | null;
  level: string;
  path: string[];
  why?: DivergenceWhy;
}

/** The file's first divergence over every step x rank graph (tbprobe's files; null for msprobe's). */
export interface RunFirstDivergence {
  step: number;
  rank: number;
  name: string;
  exec_order: number | null;
}

export interface Findings {
  first_divergence: FirstDivergence | null;
  first_overflow: Row | null;
  run_first_divergence?: RunFirstDivergence | null;
}
