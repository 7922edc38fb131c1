// The module TensorBoard loads in the GRAPH_ASCEND iframe: it calls render(). Every URL is relative to this
// module's own URL (…/data/plugin/graph_ascend/index.js), so --path_prefix works.
import { baseFromModuleUrl } from "./api/client";
import { App } from "./views/app";

export async function render(): Promise<void> {
  document.body.style.margin = "0";
  const app = new App(baseFromModuleUrl(import.meta.url), document.body);
  await app.start();
}
