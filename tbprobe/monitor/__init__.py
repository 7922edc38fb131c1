"""The training monitor: per-module, per-parameter statistics of a training run as TensorBoard scalars, one run
per rank, with anomaly detection and a CSV export in the reference monitor's layout. See docs/monitor.md.

Names that need torch load on first use, so the TensorBoard plugin can read monitor tags without torch.
"""
from tbprobe._lazy import lazy_exports

__all__ = ["TrainerMon", "MonitorConfig", "load_config"]

_LAZY = {
    "TrainerMon": ("tbprobe.monitor.trainer_mon", "TrainerMon"),
    "MonitorConfig": ("tbprobe.monitor.config", "MonitorConfig"),
    "load_config": ("tbprobe.monitor.config", "load_config"),
}

__getattr__ = lazy_exports(__name__, _LAZY)
