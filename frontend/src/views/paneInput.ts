// Mouse and keyboard on a graph pane: wheel zoom around the cursor (animated), drag to pan, click to select,
// double-click to expand or collapse; arrows, Enter/Space, +/- and f on a focused pane.
import type { LayoutNode } from "../layout/tree";
import type { GraphPane } from "./graphPane";

export function bindPaneInput(pane: GraphPane): void {
  const c = pane.canvas;
  const local = (ev: MouseEvent) => {
    const r = c.getBoundingClientRect();
    return { x: ev.clientX - r.left, y: ev.clientY - r.top };
  };
  c.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const p = local(ev);
    // Pinch / ctrl+wheel and plain wheel both zoom around the cursor (the reference panned instead).
    const delta = ev.deltaMode === 1 ? ev.deltaY * 16 : ev.deltaY;
    const base = pane.zoomTarget ? pane.zoomTarget.scale : pane.camera.scale;
    const scale = Math.max(0.002, Math.min(4, base * Math.exp(-delta * 0.0018)));
    pane.zoomTarget = { scale, sx: p.x, sy: p.y };
    pane.requestDraw();
  }, { passive: false });
  let drag: { x: number; y: number; tx: number; ty: number; moved: boolean } | null = null;
  c.addEventListener("pointerdown", (ev) => {
    if (ev.button !== 0) return;
    c.focus();
    drag = { x: ev.clientX, y: ev.clientY, tx: pane.camera.tx, ty: pane.camera.ty, moved: false };
    c.setPointerCapture?.(ev.pointerId);
  });
  c.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x;
    const dy = ev.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    drag.moved = true;
    pane.zoomTarget = null;
    pane.camera.tx = drag.tx + dx;
    pane.camera.ty = drag.ty + dy;
    c.style.cursor = "grabbing";
    pane.requestDraw();
  });
  c.addEventListener("pointerup", (ev) => {
    const d = drag;
    drag = null;
    c.style.cursor = "";
    if (d?.moved) pane.cameraMoved();
    if (d && !d.moved) {
      const n = pane.nodeAt(ev);
      if (n) pane.host.onSelect(pane.side, n);
    }
  });
  c.addEventListener("dblclick", (ev) => {
    const n = pane.nodeAt(ev);
    if (!n) return;
    ev.preventDefault();
    pane.host.onSelect(pane.side, n);
    void pane.toggle(n).catch((e) => pane.host.onError(e));
  });
  c.addEventListener("keydown", (ev) => onKey(pane, ev));
}

function onKey(pane: GraphPane, ev: KeyboardEvent): void {
  const name = pane.host.selectedOn(pane.side);
  const n = name ? pane.byName.get(name) : undefined;
  const select = (m: LayoutNode | undefined | null) => {
    if (!m || !m.name) return;
    pane.host.onSelect(pane.side, m);
    const r = pane.nodeRect(m.name);
    if (!r) pane.focus(m);
  };
  let handled = true;
  switch (ev.key) {
    case "Enter":
    case " ":
      if (n) void pane.toggle(n).catch((e) => pane.host.onError(e));
      break;
    case "ArrowRight":
      if (n && !n.expanded) void pane.expandNode(n).catch((e) => pane.host.onError(e));
      else if (n?.children?.length) select(n.children[0]);
      break;
    case "ArrowLeft":
      if (n && n.expanded) pane.collapseNode(n);
      else select(n?.parent);
      break;
    case "ArrowDown":
      if (!n) select(pane.root);
      else if (n.parent?.children) select(n.parent.children[n.index + 1]);
      break;
    case "ArrowUp":
      if (n?.parent?.children) select(n.parent.children[n.index - 1]);
      break;
    case "+":
    case "=":
      pane.zoomBy(1.25);
      break;
    case "-":
      pane.zoomBy(0.8);
      break;
    case "f":
      pane.fit();
      break;
    default:
      handled = false;
  }
  if (handled) ev.preventDefault();
}
