// The page's styles, injected as one <style> element (TensorBoard's CSP allows inline styles; no extra asset).
export const CSS = `
.ga-root { --bg:#fff; --fg:#202124; --muted:#5f6368; --line:#dadce0; --panel:#f8f9fa; --accent:#1a73e8;
  --hover:#e8f0fe; --first:#fce8e6;
  position:fixed; inset:0; display:flex; flex-direction:column; background:var(--bg); color:var(--fg);
  font:13px system-ui, "Noto Sans CJK SC", "Microsoft YaHei", sans-serif; }
.ga-root.ga-dark { --bg:#202124; --fg:#e8eaed; --muted:#9aa0a6; --line:#3c4043; --panel:#292a2d; --accent:#8ab4f8;
  --hover:#35363a; --first:#5c2b29; color-scheme: dark; }
.ga-root button, .ga-root select, .ga-root input, .ga-button { font:inherit; color:var(--fg); background:var(--panel);
  border:1px solid var(--line); border-radius:4px; padding:3px 8px; }
.ga-root button:hover, .ga-button:hover { background:var(--hover); cursor:pointer; }
.ga-root button:disabled { opacity:.5; cursor:default; }
.ga-button { text-decoration:none; display:inline-block; }
.ga-topbar { display:flex; flex-wrap:wrap; gap:8px; align-items:center; padding:6px 10px; border-bottom:1px solid var(--line); }
.ga-tabs { display:flex; gap:2px; margin-left:8px; }
.ga-tabs button.ga-active { background:var(--accent); color:var(--bg); border-color:var(--accent); }
.ga-spacer { flex:1; }
.ga-body { flex:1; min-height:0; display:flex; position:relative; }
.ga-body > * { flex:1; min-width:0; }
.ga-graph-view { display:flex; min-height:0; }
/* overflow-y: in a window too low for the panes' and the details' minimum heights the column scrolls, so the
   details stay reachable; where they fit, the panes take the rest and nothing scrolls */
.ga-graph-main { flex:1; min-width:0; display:flex; flex-direction:column; min-height:0;
  overflow-y:auto; }
.ga-toolbar { display:flex; flex-wrap:wrap; gap:6px; align-items:center; padding:6px 10px; }
.ga-breadcrumbs { padding:2px 10px 6px; white-space:nowrap; overflow-x:auto; }
.ga-crumb { color:var(--accent); text-decoration:none; }
.ga-panes { flex:1; min-height:120px; display:flex; gap:4px; padding:0 6px; }
.ga-pane { flex:1; min-width:0; position:relative; border:1px solid var(--line); border-radius:4px; overflow:hidden; }
.ga-pane-title { position:absolute; left:8px; top:4px; font-weight:600; color:var(--muted); pointer-events:none; z-index:1; }
.ga-canvas { width:100%; height:100%; display:block; outline:none; cursor:default; touch-action:none; }
/* the minimap sat over the pane's bottom-right labels: translucent until pointed at, and hidden by its button */
.ga-minimap-box { position:absolute; right:6px; bottom:6px; display:flex; flex-direction:column; align-items:flex-end;
  gap:2px; }
.ga-minimap { width:128px; height:88px; border:1px solid var(--line); border-radius:3px; cursor:crosshair;
  opacity:.35; transition:opacity .12s; box-shadow:0 1px 4px rgba(0,0,0,.2); }
.ga-minimap:hover { opacity:.95; }
.ga-minimap[hidden], .ga-minimap-box[hidden] { display:none; }
.ga-root .ga-minimap-toggle { line-height:14px; opacity:.75; }
.ga-root .ga-minimap-toggle:hover { opacity:1; }
.ga-details { height:32%; min-height:90px; overflow:auto; border-top:1px solid var(--line); padding:4px 10px; }
.ga-details h3, .ga-side h3 { font-size:13px; margin:6px 0 4px; }
.ga-details h4 { font-size:12px; margin:8px 0 4px; color:var(--muted); }
.ga-node-name { font-weight:600; word-break:break-all; }
.ga-side { flex:0 0 320px; overflow:auto; border-left:1px solid var(--line); padding:0 10px 10px; background:var(--panel); }
.ga-side section { border-bottom:1px solid var(--line); padding-bottom:6px; }
.ga-row { display:flex; flex-wrap:wrap; gap:6px; align-items:center; margin:4px 0; }
.ga-row input[type=search] { flex:1; min-width:120px; }
.ga-side-label[hidden] { display:none; }
.ga-inline { display:inline-flex; align-items:center; gap:2px; margin-right:6px; white-space:nowrap; }
.ga-checks { display:flex; flex-wrap:wrap; }
.ga-list { list-style:none; margin:4px 0; padding:0; max-height:220px; overflow:auto; }
.ga-list li { padding:2px 4px; display:flex; gap:6px; align-items:center; border-radius:3px; }
.ga-list li > .ga-item-name { overflow:hidden; text-overflow:ellipsis; white-space:nowrap; flex:1; min-width:0; }
.ga-list li:has(> .ga-metrics) { flex-wrap:wrap; row-gap:0; }
.ga-list li > .ga-metrics { flex:1 0 100%; min-width:0; padding-left:14px; font-size:11px; overflow:hidden;
  text-overflow:ellipsis; white-space:nowrap; }
.ga-clickable { cursor:pointer; }
.ga-clickable:hover { background:var(--hover); }
.ga-muted { color:var(--muted); }
.ga-count { color:var(--muted); margin-left:auto; }
.ga-dot { width:9px; height:9px; border-radius:50%; flex:0 0 auto; border:1px solid var(--line); }
.ga-p-pass { background:#FFFCF3; } .ga-p-warning { background:#FFDC7F; } .ga-p-error { background:#FF704D; }
.ga-p-none { background:#C7C7C7; }
.ga-badge { font-size:11px; padding:0 5px; border-radius:8px; color:#202124; }
.ga-o-medium { background:#B6C7FC; } .ga-o-high { background:#7E96F0; } .ga-o-critical { background:#4668B8; color:#fff; }
.ga-metrics { font-size:11px; white-space:nowrap; }
.ga-legend-item { display:flex; align-items:center; gap:6px; margin:3px 0; }
.ga-legend-item input[type=color] { width:32px; height:20px; padding:0; }
.ga-legend-message { color:#a50e0e; margin:4px 0; }
.ga-dark .ga-legend-message { color:#f6aea9; }
.ga-gradient { height:12px; border-radius:3px; border:1px solid var(--line); }
.ga-swatch { width:28px; height:16px; border-radius:3px; border:1px solid var(--line); }
.ga-table { border-collapse:collapse; font-size:12px; }
.ga-table th, .ga-table td { border:1px solid var(--line); padding:2px 6px; text-align:left; white-space:nowrap; }
.ga-table th { background:var(--panel); cursor:pointer; position:sticky; top:0; }
.ga-table th.ga-sort-asc::after { content:" ▲"; } .ga-table th.ga-sort-desc::after { content:" ▼"; }
.ga-table td.ga-diff { font-weight:600; }
.ga-row-error td:first-child { box-shadow: inset 4px 0 #FF704D; }
.ga-row-warning td:first-child { box-shadow: inset 4px 0 #FFDC7F; }
.ga-scroll-x { overflow-x:auto; }
/* the details' wide tables: a scrollbar drawn always (overlay ones showed nothing), a bar with buttons above, a
   shadow on the right edge while columns lie beyond it, and the row names kept in place */
.ga-scroll-wrap .ga-scroll-x { scrollbar-width:thin; scrollbar-color:var(--muted) var(--panel); }
.ga-scroll-x.ga-more-right { box-shadow: inset -10px 0 8px -8px rgba(0,0,0,.35); }
.ga-scroll-bar { display:flex; gap:4px; align-items:center; margin:2px 0; }
.ga-scroll-bar[hidden] { display:none; }
.ga-scroll-wrap .ga-table td.ga-param, .ga-scroll-wrap .ga-table th:first-child { position:sticky; left:0;
  background:var(--panel); z-index:1; }
.ga-scroll { overflow:auto; flex:1; min-height:0; padding:0 10px 10px; }
.ga-compare-view, .ga-overflow-view { display:flex; flex-direction:column; min-height:0; }
.ga-overflow-view { overflow:auto; padding:0 10px 10px; }
.ga-overflow-view .ga-list { max-height:none; }
.ga-first { background:var(--first); font-weight:600; }
.ga-first-divergence { background:var(--first); padding:2px 6px; border-radius:3px; margin:2px 0; }
.ga-first-tag { font-size:11px; color:var(--muted); }
.ga-stack { font-size:11px; background:var(--panel); padding:6px; max-height:180px; overflow:auto; white-space:pre-wrap; word-break:break-all; }
.ga-small { font-size:12px !important; padding:1px 6px !important; }
.ga-link { color:var(--accent); }
.ga-error { background:#fce8e6; color:#a50e0e; padding:6px 10px; border-bottom:1px solid #f5c6c2; display:flex; gap:8px; }
.ga-dark .ga-error { background:#5c2b29; color:#f6aea9; border-color:#8c3b36; }
.ga-error[hidden] { display:none; }
.ga-notice { background:#e8f0fe; color:#174ea6; padding:6px 10px; border-bottom:1px solid #c6dafc; display:flex; gap:8px; }
.ga-dark .ga-notice { background:#1f2d4a; color:#aecbfa; border-color:#2f4470; }
.ga-notice[hidden] { display:none; }
.ga-message { padding:24px; color:var(--muted); }
.ga-monitor { overflow:auto; }
.ga-pair { word-break:break-all; }
`;
