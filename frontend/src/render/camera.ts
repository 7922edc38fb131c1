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

export interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
}

/** Screen height below which a node's label is not read comfortably: a jump zooms in to at least this. */
export const READABLE_PX = 18;

/**
 * The view of a jump to `target` (world box, absolute), in a viewport of vw x vh with `top` pixels kept for the
 * pane's title. Zoomed in until the target is readable; then, horizontally, the widest of its `context` boxes
 * (its ancestors, outermost first, the root among them) that fits is shown whole, zooming out for it while the
 * target stays readable: centring on the target alone cut its row off on the right (the NPU pane after "go to the
 * first divergence" showed `pos.Em…`, `Apis_B…`). Vertically the target is centred. Last, the target with a row
 * of room around it is moved off `avoid` (the minimap's screen rectangle), up or else left, when it lies under it.
 */
export function focusView(target: Rect, context: Rect[], scale: number, vw: number, vh: number, top: number,
  avoid: Rect | null, margin = 16): { scale: number; tx: number; ty: number } {
  let s = scale;
  if (target.h * s < READABLE_PX) s = Math.min(1, (READABLE_PX + 6) / target.h);
  if (target.w * s > vw * 0.9) s = Math.max(MIN_SCALE, (vw * 0.9) / target.w);
  const avail = vw - 2 * margin;
  const readable = READABLE_PX / target.h;
  let tx = vw / 2 - (target.x + target.w / 2) * s;
  let shownBox: Rect | null = null;
  for (const box of context) {
    let bs = s;
    if (box.w * bs > avail) {
      const fitted = avail / box.w;
      if (fitted < readable) continue; // (too wide to show whole and readable: a narrower ancestor may do)
      bs = fitted;
    }
    s = bs;
    tx = (vw - box.w * s) / 2 - box.x * s;
    shownBox = box;
    break;
  }
  let ty = vh / 2 - (target.y + Math.min(target.h, vh / 3 / s) / 2) * s;
  // the shown box's top (its title) under the pane's title or above the view: moved down to it while the target
  // stays whole in view
  if (shownBox) {
    const down = top - (shownBox.y * s + ty);
    if (down > 0 && (target.y + target.h) * s + ty + down <= vh - margin) ty += down;
  }
  if (avoid) {
    const room = READABLE_PX + 8;
    const x0 = target.x * s + tx - room;
    const y0 = target.y * s + ty - room;
    const x1 = x0 + target.w * s + 2 * room;
    const y1 = y0 + Math.min(target.h * s, vh) + 2 * room;
    const under = x0 < avoid.x + avoid.w && x1 > avoid.x && y0 < avoid.y + avoid.h && y1 > avoid.y;
    if (under) {
      const up = y1 - avoid.y;
      if (y0 - up >= top - room) ty -= up;
      else tx -= x1 - avoid.x;
    }
  }
  return { scale: s, tx, ty };
}
