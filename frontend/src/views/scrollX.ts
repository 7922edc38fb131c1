// A wide table in a box that scrolls sideways, and says so: the node details' tables are three times wider than
// the page, and where scrollbars are overlaid or hidden (macOS, headless Chromium) nothing showed that columns
// past "MinRelativ…" existed. A bar above the table tells how many columns are in view and has buttons to page
// through them; the first column (the input's or output's name) stays put while the rest scroll.
import { t } from "../i18n";
import { el } from "./dom";

export interface ColumnSpan {
  left: number;
  width: number;
}

/** Which columns a box scrolled to `scrollLeft`, `clientWidth` wide, shows whole: [first, last] (0-based), or
 * null when none does; a column wider than the box counts as shown when it fills it. */
export function columnsInView(cols: ColumnSpan[], scrollLeft: number, clientWidth: number): [number, number] | null {
  let first = -1;
  let last = -1;
  const right = scrollLeft + clientWidth;
  for (let i = 0; i < cols.length; i++) {
    const c = cols[i];
    const whole = c.left >= scrollLeft - 2 && c.left + c.width <= right + 2; // (collapsed borders: a pixel or so)
    const fills = c.width > clientWidth && c.left <= scrollLeft + 2 && c.left + c.width >= right - 2;
    if (whole || fills) {
      if (first < 0) first = i;
      last = i;
    }
  }
  return first < 0 ? null : [first, last];
}

/** Where the "more columns" button scrolls to: a page on, keeping a column of overlap, at most to the end. */
export function nextScroll(scrollLeft: number, clientWidth: number, scrollWidth: number, dir: 1 | -1): number {
  const step = Math.max(40, clientWidth * 0.8);
  return Math.max(0, Math.min(scrollWidth - clientWidth, scrollLeft + dir * step));
}

export function scrollBox(table: HTMLTableElement): HTMLElement {
  const box = el("div", { class: "ga-scroll-x", testid: "scroll-x" }, table);
  const left = el("button", { class: "ga-small", testid: "scroll-left", text: "◀", "aria-label": t("columnsLeft"),
    title: t("columnsLeft") });
  const right = el("button", { class: "ga-small", testid: "scroll-right", text: "▶", "aria-label": t("columnsRight"),
    title: t("columnsRight") });
  const label = el("span", { class: "ga-muted", testid: "scroll-columns" });
  const bar = el("div", { class: "ga-scroll-bar", hidden: true }, left, right, label);
  const update = () => {
    const over = box.scrollWidth > box.clientWidth + 1;
    bar.hidden = !over;
    box.classList.toggle("ga-more-right", over && box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
    if (!over) return;
    left.disabled = box.scrollLeft <= 0;
    right.disabled = box.scrollLeft + box.clientWidth >= box.scrollWidth - 1;
    const head = table.tHead?.rows[0];
    // (from the table's own left edge; the first column, the row names, stays in place and is left out: it is
    // always in view)
    const origin = table.getBoundingClientRect().left;
    const cells = head ? [...head.cells] : [];
    const cols = cells.slice(1).map((c) => {
      const r = c.getBoundingClientRect();
      return { left: r.left - origin, width: r.width };
    });
    const fixed = cells.length ? cells[0].getBoundingClientRect().width : 0; // (what the row names cover)
    const shown = columnsInView(cols, box.scrollLeft + fixed, box.clientWidth - fixed);
    const from = shown && shown[0] === 0 ? 1 : (shown?.[0] ?? 0) + 2;
    label.textContent = shown ? `${t("columns")} ${from}–${shown[1] + 2} / ${cells.length}` : "";
  };
  const go = (dir: 1 | -1) => {
    box.scrollTo({ left: nextScroll(box.scrollLeft, box.clientWidth, box.scrollWidth, dir) });
    update();
  };
  left.addEventListener("click", () => go(-1));
  right.addEventListener("click", () => go(1));
  box.addEventListener("scroll", update);
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(update).observe(box);
  return el("div", { class: "ga-scroll-wrap" }, bar, box);
}
