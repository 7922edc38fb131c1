// Draws the minimap image of the whole graph (runs in the worker, or inline as a fallback).
import type { MinimapJob } from "./protocol";

export function rasterMinimap(job: MinimapJob): ImageBitmap | null {
  if (typeof OffscreenCanvas === "undefined") return null;
  const w = Math.max(1, Math.round(job.width));
  const h = Math.max(1, Math.round(job.height));
  const canvas = new OffscreenCanvas(w, h);
  const ctx = canvas.getContext("2d");
  if (!ctx) return null;
  ctx.fillStyle = job.background;
  ctx.fillRect(0, 0, w, h);
  // One path per colour and depth: a few fills instead of one per box, parents under their children.
  const r = job.rects;
  const layers: number[][][] = [];
  for (let i = 0; i + 5 < r.length; i += 6) {
    const d = r[i + 5];
    const layer = layers[d] ?? (layers[d] = job.colors.map(() => []));
    layer[r[i + 4]]?.push(i);
  }
  const s = job.scale;
  for (const layer of layers) {
    if (!layer) continue;
    for (let c = 0; c < job.colors.length; c++) {
      const list = layer[c];
      if (!list.length) continue;
      ctx.beginPath();
      for (const i of list) ctx.rect(r[i] * s, r[i + 1] * s, Math.max(0.5, r[i + 2] * s), Math.max(0.5, r[i + 3] * s));
      ctx.fillStyle = job.colors[c];
      ctx.fill();
    }
  }
  ctx.strokeStyle = job.stroke;
  ctx.lineWidth = 0.5;
  ctx.beginPath();
  for (let i = 0; i + 5 < r.length; i += 6) {
    if (r[i + 2] * s >= 3 && r[i + 3] * s >= 3) ctx.rect(r[i] * s, r[i + 1] * s, r[i + 2] * s, r[i + 3] * s);
  }
  ctx.stroke();
  return canvas.transferToImageBitmap();
}
