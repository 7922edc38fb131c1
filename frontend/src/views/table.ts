// A sortable table: click a header to sort (numbers numerically), again to reverse. Cells are text only.
import { compareCells, el, clear } from "./dom";

export interface Column<R> {
  key: string;
  label: string;
  title?: string;
  value(r: R): unknown;
  className?: string;
}

export interface TableOptions<R> {
  testid?: string;
  rowTestid?: string;
  onRowClick?(r: R): void;
  rowClass?(r: R): string | null;
}

export function sortableTable<R>(columns: Column<R>[], rows: R[], opts: TableOptions<R> = {}): HTMLTableElement {
  const table = el("table", { class: "ga-table", testid: opts.testid });
  const thead = el("thead");
  const tbody = el("tbody");
  let sortKey: string | null = null;
  let desc = false;
  const renderBody = () => {
    clear(tbody);
    let data = rows;
    if (sortKey !== null) {
      const col = columns.find((c) => c.key === sortKey)!;
      data = [...rows].sort((a, b) => compareCells(col.value(a), col.value(b)) * (desc ? -1 : 1));
    }
    for (const r of data) {
      const tr = el("tr", { testid: opts.rowTestid, class: opts.rowClass?.(r) ?? undefined });
      for (const c of columns) {
        const v = c.value(r);
        tr.append(el("td", { class: c.className, text: v === null || v === undefined ? "" : String(v) }));
      }
      if (opts.onRowClick) {
        tr.classList.add("ga-clickable");
        tr.addEventListener("click", () => opts.onRowClick!(r));
      }
      tbody.append(tr);
    }
  };
  const hr = el("tr");
  for (const c of columns) {
    const th = el("th", { title: c.title, text: c.label, "data-key": c.key });
    th.addEventListener("click", () => {
      desc = sortKey === c.key ? !desc : false;
      sortKey = c.key;
      for (const o of hr.children) o.classList.remove("ga-sort-asc", "ga-sort-desc");
      th.classList.add(desc ? "ga-sort-desc" : "ga-sort-asc");
      renderBody();
    });
    hr.append(th);
  }
  thead.append(hr);
  table.append(thead, tbody);
  renderBody();
  return table;
}
