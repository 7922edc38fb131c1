"""tbprobe: find where numerical precision goes wrong in deep-learning training.

The public API is small on purpose. Heavy imports (torch) happen only when a name that needs
them is first used, so that TensorBoard can load the plugin without importing torch.
"""
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "PrecisionDebugger",
    "seed_all",
    "TrainerMon",
    "__version__",
]

_LAZY = {
    "PrecisionDebugger": ("tbprobe.collector", "PrecisionDebugger"),
    "seed_all": ("tbprobe.collector", "seed_all"),
    "TrainerMon": ("tbprobe.monitor", "TrainerMon"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tbprobe' has no attribute {name!r}")
