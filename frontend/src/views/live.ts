// Following a live graph (the collector's `.vis.db`, written while training runs): its meta is read again now and
// then, the selectors and panes follow what changed, and the polling slows down once the file stops changing.
import type { Meta } from "../api/types";

/** How often a live graph's meta is read again while it changes. */
export const LIVE_POLL_MS = 3000;
/** After this long with no change (training paused or ended) it is read every LIVE_IDLE_POLL_MS only... */
export const LIVE_IDLE_AFTER_MS = 60_000;
/** ...until it changes again, which brings back LIVE_POLL_MS. */
export const LIVE_IDLE_POLL_MS = 30_000;

/** The wait before the next read, given how long the meta has not changed. */
export function liveDelay(unchangedMs: number): number {
  return unchangedMs >= LIVE_IDLE_AFTER_MS ? LIVE_IDLE_POLL_MS : LIVE_POLL_MS;
}

function sameList<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/**
 * The meta shown, brought up to a newly read one: steps, ranks, micro-steps, sides and graph type (a Bench side
 * or a rank that appears later), and whether the file is still live. `sidesChanged`: the panes must be rebuilt.
 */
export function mergeLiveMeta(cur: Meta, m: Meta): { meta: Meta; changed: boolean; sidesChanged: boolean } {
  const live = !!m.live;
  const sidesChanged = !sameList(m.sides, cur.sides) || m.graph_type !== cur.graph_type;
  const changed = sidesChanged || live !== !!cur.live || !sameList(m.steps, cur.steps) ||
    !sameList(m.ranks, cur.ranks) || m.micro_steps !== cur.micro_steps;
  if (!changed) return { meta: cur, changed, sidesChanged };
  const meta: Meta = { ...cur, steps: m.steps, ranks: m.ranks, micro_steps: m.micro_steps, sides: m.sides,
    graph_type: m.graph_type, live };
  return { meta, changed, sidesChanged };
}

/** What one poll found: a change, none (or it could not tell), or the file is no longer to be followed. */
export type PollResult = "changed" | "same" | "stop";

/**
 * Calls `poll` LIVE_POLL_MS after `start()`, then again after `liveDelay(time since the last change)`: every 3 s
 * while the file changes, every 30 s once it has not for a minute. One poll at a time (the next is scheduled when
 * one ends); "stop" or `stop()` ends it.
 */
export class LivePoller {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private run = 0;
  private lastChange = 0;

  constructor(private readonly poll: () => Promise<PollResult>, private readonly now: () => number = Date.now) {}

  get running(): boolean {
    return this.timer !== null;
  }

  start(): void {
    this.stop();
    this.lastChange = this.now();
    this.schedule(++this.run);
  }

  stop(): void {
    this.run++;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private schedule(run: number): void {
    this.timer = setTimeout(() => void this.tick(run), liveDelay(this.now() - this.lastChange));
  }

  private async tick(run: number): Promise<void> {
    let result: PollResult;
    try {
      result = await this.poll();
    } catch {
      result = "same"; // (the next poll tries again: the file may be between two writes)
    }
    if (run !== this.run) return; // stopped or started again meanwhile
    this.timer = null;
    if (result === "stop") return;
    if (result === "changed") this.lastChange = this.now();
    this.schedule(run);
  }
}
