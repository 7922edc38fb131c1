// Tiny DOM helpers of the monitor view (text goes through textContent only) and its stylesheet.

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, cls = "", testid = "", text = ""):
  HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (testid) e.dataset.testid = testid;
  if (text) e.textContent = text;
  return e;
}

export function select(testid: string, options: Array<[string, string]>, value: string): HTMLSelectElement {
  const s = h("select", "mon-select", testid);
  fillSelect(s, options, value);
  return s;
}

export function fillSelect(s: HTMLSelectElement, options: Array<[string, string]>, value: string): void {
  while (s.firstChild) s.removeChild(s.firstChild);
  for (const [v, label] of options) {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = label;
    o.selected = v === value;
    s.append(o);
  }
}

export function labelled(text: string, control: HTMLElement): HTMLLabelElement {
  const l = h("label", "mon-field");
  l.append(h("span", "mon-label", "", text), control);
  return l;
}

const CSS = `
.mon-root { display:flex; flex-direction:column; gap:8px; padding:8px; color:var(--fg,#202124);
  background:var(--bg,#fff); font:13px sans-serif; box-sizing:border-box; }
.mon-toolbar { display:flex; flex-wrap:wrap; gap:10px; align-items:flex-end; }
.mon-field { display:flex; flex-direction:column; gap:2px; }
.mon-label { font-size:11px; color:var(--muted,#5f6368); }
.mon-select, .mon-input { font:inherit; color:inherit; background:var(--panel,#f8f9fa);
  border:1px solid var(--line,#dadce0); border-radius:4px; padding:2px 4px; }
.mon-main { display:flex; gap:8px; align-items:flex-start; }
.mon-left { flex:1 1 auto; min-width:0; }
.mon-side { flex:0 0 300px; max-height:560px; overflow:auto; border:1px solid var(--line,#dadce0);
  border-radius:4px; }
.mon-side h3, .mon-chart-box h3 { margin:0; padding:4px 8px; font-size:12px; background:var(--panel,#f8f9fa); }
.mon-anomaly { display:block; width:100%; text-align:left; border:0; border-top:1px solid var(--line,#dadce0);
  background:transparent; color:inherit; font:12px sans-serif; padding:4px 8px; cursor:pointer; }
.mon-anomaly:hover { background:var(--hover,#e8f0fe); }
.mon-anomaly .mon-rule { color:#d93025; font-weight:600; }
.mon-pager { display:flex; gap:8px; align-items:center; margin:4px 0; color:var(--muted,#5f6368); }
.mon-pager button, .mon-btn { font:inherit; color:inherit; background:var(--panel,#f8f9fa);
  border:1px solid var(--line,#dadce0); border-radius:4px; padding:2px 8px; cursor:pointer; }
.mon-heatmap { display:block; cursor:crosshair; }
.mon-chart { display:block; }
.mon-legend { display:flex; flex-wrap:wrap; gap:6px; padding:4px 8px; }
.mon-legend-item { display:flex; gap:4px; align-items:center; font-size:12px; }
.mon-swatch { width:12px; height:3px; display:inline-block; }
.mon-tooltip { position:fixed; pointer-events:none; background:var(--panel,#f8f9fa); color:inherit;
  border:1px solid var(--line,#dadce0); padding:3px 6px; font-size:12px; border-radius:4px; z-index:10;
  white-space:nowrap; }
.mon-status { color:var(--muted,#5f6368); font-size:12px; min-height:16px; }
.mon-error { color:#d93025; }
.mon-hint { color:var(--muted,#5f6368); font-size:12px; padding:4px 8px; }
`;

export function injectStyle(doc: Document): void {
  if (doc.getElementById("tbprobe-monitor-style")) return;
  const s = doc.createElement("style");
  s.id = "tbprobe-monitor-style";
  s.textContent = CSS;
  doc.head.append(s);
}
