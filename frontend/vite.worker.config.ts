// Second build step: the layout worker as one self-contained classic script, static/worker.js (no hash, no chunks).
import { defineConfig } from "vite";

export default defineConfig({
  publicDir: false,
  build: {
    outDir: "../tbprobe/tb_plugin/static",
    emptyOutDir: false,
    target: "es2022",
    sourcemap: false,
    minify: true,
    lib: {
      entry: "src/layout/worker.ts",
      formats: ["iife"],
      name: "tbprobeLayoutWorker",
      fileName: () => "worker.js",
    },
  },
});
