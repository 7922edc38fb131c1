// English and Chinese strings of the monitor view.
const EN = {
  job: "Job", mode: "View", metric: "Metric", stat: "Statistic", rank: "Rank", filter: "Filter modules",
  filterHint: "layers.3, attn", step: "Step", scale: "Colour", scaleRow: "per row", scaleLog: "log |value|",
  step_module: "step × module", step_rank: "step × rank", module_rank: "module × rank",
  anomalies: "Anomalies", noAnomalies: "No anomalies recorded.", chart: "Series", clear: "Clear",
  noJobs: "No monitor runs in this log directory. Record some with tbprobe.TrainerMon (see docs/monitor.md).",
  loading: "Loading…", rows: "rows", prev: "◀ Previous", next: "Next ▶", module: "Module",
  clickHint: "Click a cell to plot its series; click more cells to compare them side by side.",
  remove: "Remove",
};
const ZH: typeof EN = {
  job: "任务", mode: "视图", metric: "指标", stat: "统计量", rank: "卡号", filter: "筛选模块",
  filterHint: "layers.3, attn", step: "步", scale: "配色", scaleRow: "按行", scaleLog: "对数 |值|",
  step_module: "步 × 模块", step_rank: "步 × 卡", module_rank: "模块 × 卡",
  anomalies: "异常", noAnomalies: "没有记录到异常。", chart: "曲线", clear: "清除",
  noJobs: "日志目录中没有监控数据。请用 tbprobe.TrainerMon 记录（见 docs/monitor.md）。",
  loading: "加载中…", rows: "行", prev: "◀ 上一页", next: "下一页 ▶", module: "模块",
  clickHint: "点击单元格绘制其曲线；再点击其他单元格可并排比较。",
  remove: "移除",
};

export type Strings = typeof EN;

export function strings(lang: "en" | "zh"): Strings {
  return lang === "zh" ? ZH : EN;
}
