// The overflow dashboard: for every rank, the overflow nodes in execution order, the first one highlighted (where
// an overflow starts is what matters), each a link to the node in the graph.
import { t } from "../i18n";
import type { AppContext } from "./context";
import { clear, el } from "./dom";

export class OverflowView {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private seq = 0;

  constructor(private ctx: AppContext) {
    this.list = el("div", { class: "ga-overflow-list", testid: "overflow-list" });
    // what each level means (the reference's rule, docs/http_api.md): a run with healthy optimizer sqrt()s lists
    // them "high" (a norm past 100 x its inputs'), which a user took for the overflow they were looking for
    this.el = el("div", { class: "ga-overflow-view" }, el("h3", { text: t("overflowList") }),
      el("p", { class: "ga-muted", testid: "overflow-levels", text: t("overflowLevels") }), this.list);
  }

  async reload(): Promise<void> {
    const seq = ++this.seq;
    const meta = this.ctx.meta();
    if (!meta) return;
    const k = this.ctx.graphKey();
    const ranks = meta.ranks.length ? meta.ranks : [k.rank];
    const results = await Promise.all(ranks.map((rank) =>
      this.ctx.api.overflow({ ...k, rank }).catch((e: unknown) => {
        this.ctx.error(e);
        return { items: [] };
      })));
    if (seq !== this.seq) return;
    clear(this.list);
    ranks.forEach((rank, i) => {
      const items = results[i].items;
      const section = el("section", { class: "ga-overflow-rank" },
        el("h4", { text: `${t("rank")} ${rank} (${items.length})` }));
      if (!items.length) section.append(el("p", { class: "ga-muted", text: t("noOverflow") }));
      else if (!items.some((it) => it.first === true)) {
        // no start; the server names where Inf/NaN first comes in when a call the dump does not record made it
        const enters = items.find((it) => it.enters === true);
        section.append(el("p", { class: "ga-muted", testid: "overflow-no-start",
          text: enters ? t("overflowEnters").replace("{name}", enters.name) : t("overflowNoStart") }));
      }
      const ol = el("ol", { class: "ga-list" });
      items.forEach((it) => {
        // where the overflow starts, as the server says (docs/http_api.md): none when no node is critical, never
        // the earliest of the list (a high one had Inf coming in already)
        const first = it.first === true;
        const enters = !first && it.enters === true;
        const li = el("li", { testid: "overflow-item", class: `ga-clickable${first || enters ? " ga-first" : ""}`,
          title: t("goToGraph") },
          el("span", { class: `ga-badge ga-o-${it.overflow}`, text: t(it.overflow) }),
          el("span", { class: "ga-item-name", text: it.name }),
          first ? el("span", { class: "ga-first-tag", text: t("first") }) : null,
          enters ? el("span", { class: "ga-first-tag", testid: "overflow-enters", text: t("entersTag") }) : null);
        li.addEventListener("click", () => void this.ctx.goToNode("NPU", it.name, rank));
        ol.append(li);
      });
      section.append(ol);
      this.list.append(section);
    });
  }
}
