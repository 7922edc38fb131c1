// The minimap: the whole laid-out graph (not only what is on screen) with the viewport as a rectangle. The image
// is rebuilt only when the layout or colours change (in the worker when it can); a pan only redraws the rectangle.
// Dragging or clicking in it moves the main view. It sat over the bottom-right labels of the pane: it is
// translucent until the pointer is on it, and a button beside it hides it (remembered in localStorage).
import type { LayoutEngine } from "../layout/engine";
import type { LayoutNode } from "../layout/tree";
import type { Camera } from "./camera";
import { mix, type Theme } from "./colors";

// (160 x 110 covered a row of nodes and their labels in the corner of a 540 x 470 pane after a jump)
export const MINIMAP_W = 128;
export const MINIMAP_H = 88;
/** Where the minimap box sits in its pane: its offset from the bottom-right corner, and its button's height. */
export const MINIMAP_INSET = 6;
export const MINIMAP_TOGGLE_H = 22;

/** A pane smaller than this (either way) hides its minimap: there it covered too much of the graph. */
export const MINIMAP_MIN_PANE: [number, number] = [MINIMAP_W * 3, MINIMAP_H * 3];

/** The screen rectangle (in pane coordinates) a shown minimap and its button take in a vw x vh pane. */
export function minimapRect(vw: number, vh: number): { x: number; y: number; w: number; h: number } {
  const w = MINIMAP_W + 2;
  const h = MINIMAP_H + 2 + MINIMAP_TOGGLE_H;
  return { x: vw - MINIMAP_INSET - w, y: vh - MINIMAP_INSET - h, w, h };
}

const HIDDEN_KEY = "tbprobe.minimapHidden";

function storedHidden(): boolean {
  try {
    return window.localStorage?.getItem(HIDDEN_KEY) === "1";
  } catch {
    return false; // (storage refused: sandboxed frame)
  }
}

function storeHidden(hidden: boolean): void {
  try {
    window.localStorage?.setItem(HIDDEN_KEY, hidden ? "1" : "0");
  } catch {
    /* kept for this page only */
  }
}

export interface MinimapLabels {
  hide: string;
  show: string;
}

export class Minimap {
  /** the minimap and its hide/show button, placed in the pane's bottom-right corner */
  readonly el: HTMLElement;
  readonly canvas: HTMLCanvasElement;
  readonly toggle: HTMLButtonElement;
  private hiddenNow = false;
  private image: ImageBitmap | HTMLCanvasElement | null = null;
  private scale = 1;
  private worldW = 1;
  private worldH = 1;
  private job = 0;

  constructor(testId: string, private onMove: (wx: number, wy: number) => void,
    private labels: MinimapLabels = { hide: "Hide the minimap", show: "Show the minimap" }) {
    this.canvas = document.createElement("canvas");
    this.canvas.className = "ga-minimap";
    this.canvas.dataset.testid = testId;
    this.canvas.width = MINIMAP_W;
    this.canvas.height = MINIMAP_H;
    this.toggle = document.createElement("button");
    this.toggle.className = "ga-minimap-toggle ga-small";
    this.toggle.dataset.testid = `${testId}-toggle`;
    this.toggle.addEventListener("click", (ev) => {
      ev.stopPropagation();
      this.setHidden(!this.hiddenNow);
      storeHidden(this.hiddenNow);
    });
    this.el = document.createElement("div");
    this.el.className = "ga-minimap-box";
    this.el.append(this.toggle, this.canvas);
    this.setHidden(storedHidden());
    let dragging = false;
    const move = (ev: PointerEvent) => {
      const r = this.canvas.getBoundingClientRect();
      this.onMove((ev.clientX - r.left) / this.scale, (ev.clientY - r.top) / this.scale);
    };
    this.canvas.addEventListener("pointerdown", (ev) => {
      dragging = true;
      this.canvas.setPointerCapture?.(ev.pointerId);
      move(ev);
      ev.stopPropagation();
    });
    this.canvas.addEventListener("pointermove", (ev) => dragging && move(ev));
    this.canvas.addEventListener("pointerup", () => (dragging = false));
  }

  get hidden(): boolean {
    return this.hiddenNow;
  }

  private tooSmall = false;

  /** Whether the minimap shows in a pane of vw x vh: not hidden by its button, and the pane big enough. */
  shownIn(vw: number, vh: number): boolean {
    return !this.hiddenNow && vw >= MINIMAP_MIN_PANE[0] && vh >= MINIMAP_MIN_PANE[1];
  }

  /** Hide the whole box (button too) in a pane too small for it; shown again when the pane grows. */
  fitPane(vw: number, vh: number): void {
    const small = vw < MINIMAP_MIN_PANE[0] || vh < MINIMAP_MIN_PANE[1];
    if (small === this.tooSmall) return;
    this.tooSmall = small;
    this.el.hidden = small;
  }

  /** Hide the minimap (its button stays, as a small tab in the corner) or show it again. */
  setHidden(hidden: boolean): void {
    this.hiddenNow = hidden;
    this.canvas.hidden = hidden;
    this.el.classList.toggle("ga-minimap-collapsed", hidden);
    this.toggle.textContent = hidden ? "▣" : "×";
    this.toggle.title = hidden ? this.labels.show : this.labels.hide;
    this.toggle.setAttribute("aria-label", this.toggle.title);
    this.toggle.setAttribute("aria-pressed", String(!hidden));
  }

  /** Rebuild the image of the whole tree. */
  async rebuild(root: LayoutNode, fill: (n: LayoutNode) => string, theme: Theme, engine: LayoutEngine): Promise<void> {
    const job = ++this.job;
    this.worldW = Math.max(root.w, 1);
    this.worldH = Math.max(root.h, 1);
    this.scale = Math.min(MINIMAP_W / this.worldW, MINIMAP_H / this.worldH);
    const colors: string[] = [];
    const colorIndex = new Map<string, number>();
    const rects: number[] = [];
    const minPx = 0.25 / this.scale;
    // Parents before children, with a stack of its own (a recursive walk overflowed the call stack on a graph
    // 20,000 levels deep).
    const stack: [LayoutNode, number, number][] = [[root, root.x, root.y]];
    while (stack.length) {
      const [n, ax, ay] = stack.pop()!;
      const c = n.expanded && n.children?.length ? mix(fill(n), theme.background, theme.dark ? 0.8 : 0.7) : fill(n);
      let ci = colorIndex.get(c);
      if (ci === undefined) {
        ci = colors.length;
        colors.push(c);
        colorIndex.set(c, ci);
      }
      rects.push(ax, ay, n.w, n.h, ci, n.depth);
      if (n.expanded && n.children && n.h > minPx * 4) {
        for (let i = n.children.length - 1; i >= 0; i--) {
          const k = n.children[i];
          stack.push([k, ax + k.x, ay + k.y]);
        }
      }
    }
    const bitmap = await engine.minimap({
      width: MINIMAP_W, height: MINIMAP_H, scale: this.scale, rects: new Float64Array(rects), colors,
      background: theme.background, stroke: theme.stroke,
    });
    if (job !== this.job) return;
    this.image = bitmap ?? this.drawInline(rects, colors, theme);
  }

  private drawInline(rects: number[], colors: string[], theme: Theme): HTMLCanvasElement | null {
    const c = document.createElement("canvas");
    c.width = MINIMAP_W;
    c.height = MINIMAP_H;
    const ctx = c.getContext("2d");
    if (!ctx) return null;
    ctx.fillStyle = theme.background;
    ctx.fillRect(0, 0, MINIMAP_W, MINIMAP_H);
    const s = this.scale;
    for (let i = 0; i < rects.length; i += 6) {
      ctx.fillStyle = colors[rects[i + 4]];
      ctx.fillRect(rects[i] * s, rects[i + 1] * s, Math.max(0.5, rects[i + 2] * s), Math.max(0.5, rects[i + 3] * s));
    }
    return c;
  }

  /** Redraw the image and the viewport rectangle (cheap: called on every pan frame). */
  drawViewport(cam: Camera, vw: number, vh: number, theme: Theme): void {
    if (this.hiddenNow || this.tooSmall) return;
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    ctx.clearRect(0, 0, MINIMAP_W, MINIMAP_H);
    ctx.fillStyle = theme.background;
    ctx.fillRect(0, 0, MINIMAP_W, MINIMAP_H);
    if (this.image) ctx.drawImage(this.image, 0, 0);
    const tl = cam.toWorld(0, 0);
    const s = this.scale;
    ctx.strokeStyle = theme.selection;
    ctx.lineWidth = 1.5;
    ctx.strokeRect(tl.x * s, tl.y * s, (vw / cam.scale) * s, (vh / cam.scale) * s);
  }
}
