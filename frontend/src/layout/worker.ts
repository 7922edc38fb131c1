// static/worker.js: layout of long child lists and the minimap raster, off the page's main thread.
import { gridPositions } from "./tree";
import { rasterMinimap } from "./raster";
import type { WorkerReply, WorkerRequest } from "./protocol";

interface WorkerScope {
  onmessage: ((ev: MessageEvent<WorkerRequest>) => void) | null;
  postMessage(msg: WorkerReply, transfer?: Transferable[]): void;
}
const scope = self as unknown as WorkerScope;

scope.onmessage = (ev) => {
  const req = ev.data;
  try {
    if (req.kind === "grid") {
      const g = gridPositions(req.n);
      scope.postMessage({ id: req.id, kind: "grid", xy: g.xy, w: g.w, h: g.h }, [g.xy.buffer]);
    } else if (req.kind === "minimap") {
      const bitmap = rasterMinimap(req.job);
      scope.postMessage({ id: req.id, kind: "minimap", bitmap }, bitmap ? [bitmap] : []);
    }
  } catch {
    scope.postMessage({ id: req.id, kind: "error" });
  }
};
