// How nodes are coloured in the current mode (legend / overflow / metric), for a side of the graph.
import type { Meta, NodeColors, Side } from "../api/types";
import { legendLookup, OVERFLOW_COLORS, OVERFLOW_RANK, unmatchedColor, type LogScale, type Theme } from "../render/colors";
import type { LayoutNode } from "../layout/tree";
import type { ColorMode } from "../state/state";

export interface Colouring {
  fill(n: LayoutNode): string;
  badge(n: LayoutNode): string | null;
}

export function makeColouring(opts: {
  mode: ColorMode; side: Side; meta: Meta; legend: NodeColors; theme: Theme; worstInside: boolean;
  metric: Map<string, number> | null; scale: LogScale | null;
}): Colouring {
  const { mode, side, meta, legend, theme } = opts;
  const compare = meta.graph_type === "compare";
  const lookup = legendLookup(legend);
  const unmatched = unmatchedColor(legend) ?? "#C7C7C7";
  const neutral = theme.neutral;
  const legendFill = (p: number | null, matched: boolean): string => {
    // Precision lives on the debug side: a matched bench node has none of its own. It is drawn in a colour of its
    // own, not the neutral grey (read as the legend's "unmatched"), nor its twin's colour (a red bench box would say
    // the reference run diverges; the selected node's twin is outlined instead).
    if (side === "Bench") return !compare ? neutral : matched ? theme.benchMatched : unmatched;
    if (!compare) return neutral;
    if (p === null && matched) return neutral; // matched but nothing to compare (structure-only files)
    return lookup(p, true) ?? neutral;
  };
  const fill = (n: LayoutNode): string => {
    if (!n.name) return neutral; // still loading
    const s = n.summary;
    if (mode === "overflow") return s.overflow ? OVERFLOW_COLORS[s.overflow] : neutral;
    if (mode === "metric") {
      // Metrics are the debug node's comparison results; the bench side stays neutral in this mode.
      if (side === "Bench" || !opts.metric || !opts.scale) return neutral;
      return opts.scale.color(opts.metric.get(n.name)) ?? neutral;
    }
    if (s.overflow && !compare) return OVERFLOW_COLORS[s.overflow];
    return legendFill(s.precision, s.matched);
  };
  const badge = (n: LayoutNode): string | null => {
    if (!opts.worstInside || n.expanded || n.summary.n_children === 0) return null;
    const s = n.summary;
    if (mode === "overflow" || (!compare && mode === "legend")) {
      const inner = s.subtree_overflow;
      if (inner && (!s.overflow || OVERFLOW_RANK[inner] > OVERFLOW_RANK[s.overflow])) return OVERFLOW_COLORS[inner];
      return null;
    }
    if (mode === "legend" && side === "NPU" && compare) {
      const inner = s.subtree_precision;
      if (inner !== null && inner > (s.precision ?? -1)) return lookup(inner, true);
    }
    return null;
  };
  return { fill, badge };
}
