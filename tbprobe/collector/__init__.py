"""The collector: PrecisionDebugger and its hooks (framework-neutral core, one adapter per framework).

Core (no framework import): config, naming, filters, recorder, writer, events, guard.
PyTorch adapter: tbprobe.collector.pytorch.
"""
from tbprobe.collector.pytorch.debugger import PrecisionDebugger
from tbprobe.collector.pytorch.seed import seed_all

__all__ = ["PrecisionDebugger", "seed_all"]
