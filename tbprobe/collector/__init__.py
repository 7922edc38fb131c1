"""The collector: PrecisionDebugger and its hooks (framework-neutral core, one adapter per framework).

Core (no framework import): config, naming, filters, recorder, writer, events, live_graph, guard.
PyTorch adapter: tbprobe.collector.pytorch. torch is imported only when PrecisionDebugger or seed_all is first
used, so `tbprobe config check` and the CLI start without it.
"""
from typing import Any

__all__ = ["PrecisionDebugger", "seed_all"]

_LAZY = {
    "PrecisionDebugger": "tbprobe.collector.pytorch.debugger",
    "seed_all": "tbprobe.collector.pytorch.seed",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tbprobe.collector' has no attribute {name!r}")
