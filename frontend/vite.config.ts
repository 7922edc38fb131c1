// Builds src/main.ts into ../tbprobe/tb_plugin/static/index.js: the ES module TensorBoard loads in the plugin
// iframe (it calls the exported render()). The layout worker is a second build (vite.worker.config.ts) because
// TensorBoard's iframe refuses blob: workers: the worker must be a plain file the plugin serves at static/worker.js.
import { defineConfig } from "vite";

export default defineConfig({
  publicDir: false,
  build: {
    outDir: "../tbprobe/tb_plugin/static",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    minify: true,
    lib: {
      entry: "src/main.ts",
      formats: ["es"],
      fileName: () => "index.js",
    },
  },
});
