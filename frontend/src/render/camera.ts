// World <-> screen transform of a pane: screen = world * scale + (tx, ty). Panning changes only tx, ty: the layout
// is never recomputed on pan or zoom.

export const MIN_SCALE = 0.002;
export const MAX_SCALE = 4;

export class Camera {
  scale = 1;
  tx = 0;
  ty = 0;

  toWorld(sx: number, sy: number): { x: number; y: number } {
    return { x: (sx - this.tx) / this.scale, y: (sy - this.ty) / this.scale };
  }

  toScreen(wx: number, wy: number): { x: number; y: number } {
    return { x: wx * this.scale + this.tx, y: wy * this.scale + this.ty };
  }

  /** Zoom by a factor keeping the world point under (sx, sy) fixed. */
  zoomAt(sx: number, sy: number, factor: number): void {
    const next = Math.max(MIN_SCALE, Math.min(MAX_SCALE, this.scale * factor));
    const w = this.toWorld(sx, sy);
    this.scale = next;
    this.tx = sx - w.x * next;
    this.ty = sy - w.y * next;
  }

  /**
   * Show the world box (x, y, w, h) inside a viewport of vw x vh, with a margin, never above maxScale; `top` is the
   * room kept free above it (a pane's title), at least the margin.
   */
  fit(x: number, y: number, w: number, h: number, vw: number, vh: number, margin = 16, maxScale = 1.25,
    top = margin): void {
    const above = Math.max(top, margin);
    const s = Math.min((vw - 2 * margin) / Math.max(w, 1), (vh - above - margin) / Math.max(h, 1), maxScale);
    this.scale = Math.max(MIN_SCALE, s);
    this.tx = (vw - w * this.scale) / 2 - x * this.scale;
    this.ty = Math.max(above, (vh - h * this.scale) / 2) - y * this.scale;
  }

  /** Move so the world point is centred, keeping the scale. */
  centerOn(wx: number, wy: number, vw: number, vh: number): void {
    this.tx = vw / 2 - wx * this.scale;
    this.ty = vh / 2 - wy * this.scale;
  }
}
