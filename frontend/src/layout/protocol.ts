// Messages between the page and static/worker.js.

export interface MinimapJob {
  width: number;
  height: number;
  scale: number;
  /** x, y, w, h, colourIndex, depth per box (stride 6), in world units, parents before children */
  rects: Float64Array;
  colors: string[];
  background: string;
  stroke: string;
}

export type WorkerRequest =
  | { id: number; kind: "grid"; n: number }
  | { id: number; kind: "minimap"; job: MinimapJob };

export type WorkerReply =
  | { id: number; kind: "grid"; xy: Float64Array; w: number; h: number }
  | { id: number; kind: "minimap"; bitmap: ImageBitmap | null }
  | { id: number; kind: "error" };
