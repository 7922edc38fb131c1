"""tbprobe: find where numerical precision goes wrong in deep-learning training.

The public API is small on purpose. Heavy imports (torch) happen only when a name that needs
them is first used, so that TensorBoard can load the plugin without importing torch.
"""
from tbprobe._lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "PrecisionDebugger",
    "seed_all",
    "module_dump",
    "module_dump_end",
    "TrainerMon",
    "__version__",
]

_LAZY = {
    "PrecisionDebugger": ("tbprobe.collector", "PrecisionDebugger"),
    "seed_all": ("tbprobe.collector", "seed_all"),
    "module_dump": ("tbprobe.collector", "module_dump"),
    "module_dump_end": ("tbprobe.collector", "module_dump_end"),
    "TrainerMon": ("tbprobe.monitor", "TrainerMon"),
}

__getattr__ = lazy_exports(__name__, _LAZY)
