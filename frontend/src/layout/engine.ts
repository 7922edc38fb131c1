// The layout worker's client. Very long child lists are placed in the worker (static/worker.js, a file served by the
// plugin: TensorBoard's iframe refuses blob: workers), and so is the minimap raster of the whole graph. Whenever
// the worker is unavailable (tests, old browsers, a failed load) the same functions run inline.
import { gridPositions } from "./tree";
import type { MinimapJob, WorkerReply, WorkerRequest } from "./protocol";
import { rasterMinimap } from "./raster";

/**
 * Below this many children the inline layout is faster than a round trip to the worker: placing 20k boxes is under
 * a millisecond of arithmetic, while a message to a worker that may be busy with the minimap costs more (measured
 * 20 ms under load). The worker's real job is the minimap raster of the whole graph.
 */
export const WORKER_MIN_CHILDREN = 200_000;

export class LayoutEngine {
  private worker: Worker | null = null;
  private seq = 0;
  private pending = new Map<number, (r: WorkerReply) => void>();

  constructor(workerUrl: string | null) {
    if (!workerUrl || typeof Worker === "undefined") return;
    try {
      this.worker = new Worker(workerUrl);
      this.worker.onmessage = (ev: MessageEvent<WorkerReply>) => {
        const cb = this.pending.get(ev.data.id);
        this.pending.delete(ev.data.id);
        cb?.(ev.data);
      };
      this.worker.onerror = () => this.fail();
    } catch {
      this.worker = null;
    }
  }

  get usesWorker(): boolean {
    return this.worker !== null;
  }

  private fail(): void {
    this.worker?.terminate();
    this.worker = null;
    const waiting = [...this.pending.values()];
    this.pending.clear();
    for (const cb of waiting) cb({ id: -1, kind: "error" });
  }

  private call(req: WorkerRequest, transfer: Transferable[] = []): Promise<WorkerReply> {
    return new Promise((resolve) => {
      if (!this.worker) return resolve({ id: -1, kind: "error" });
      const id = ++this.seq;
      this.pending.set(id, resolve);
      this.worker.postMessage({ ...req, id }, transfer);
    });
  }

  async grid(n: number): Promise<{ xy: Float64Array; w: number; h: number }> {
    if (n >= WORKER_MIN_CHILDREN && this.worker) {
      const r = await this.call({ id: 0, kind: "grid", n });
      if (r.kind === "grid") return { xy: r.xy, w: r.w, h: r.h };
    }
    return gridPositions(n);
  }

  /** An image of the whole graph for the minimap; null when neither the worker nor OffscreenCanvas can draw. */
  async minimap(job: MinimapJob): Promise<ImageBitmap | null> {
    if (this.worker && typeof OffscreenCanvas !== "undefined") {
      const r = await this.call({ id: 0, kind: "minimap", job }, [job.rects.buffer]);
      if (r.kind === "minimap") return r.bitmap;
    }
    return rasterMinimap(job);
  }
}
