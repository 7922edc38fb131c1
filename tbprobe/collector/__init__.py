"""The collector: PrecisionDebugger and its hooks (framework-neutral core, one adapter per framework).

Core (no framework import): config, naming, filters, recorder, writer, events, live_graph, step_outputs, guard
(tests/collector/test_seam.py checks it).
PyTorch adapter: tbprobe.collector.pytorch. torch is imported only when PrecisionDebugger or seed_all is first
used, so `tbprobe config check` and the CLI start without it.
"""
from tbprobe._lazy import lazy_exports

__all__ = ["PrecisionDebugger", "seed_all", "module_dump", "module_dump_end"]

_LAZY = {
    "PrecisionDebugger": ("tbprobe.collector.pytorch.debugger", "PrecisionDebugger"),
    "seed_all": ("tbprobe.collector.pytorch.seed", "seed_all"),
    "module_dump": ("tbprobe.collector.pytorch.instances", "module_dump"),
    "module_dump_end": ("tbprobe.collector.pytorch.instances", "module_dump_end"),
}

__getattr__ = lazy_exports(__name__, _LAZY)
