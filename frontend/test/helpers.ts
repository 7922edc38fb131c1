import type { NodeSummary } from "../src/api/types";

export function summary(name: string, n_children = 0, extra: Partial<NodeSummary> = {}): NodeSummary {
  return {
    name, type: n_children ? 0 : 1, n_children, precision: 0, overflow: null, subtree_precision: null,
    subtree_overflow: null, matched: true, micro_step: 0, order: 0, ...extra,
  };
}
