"""tb_config values written by tbprobe: the task names, tool tips and colour legends (tbprobe's own wording, the
reference's keys and colours so its plugin reads them)."""
from typing import Dict, Optional

__all__ = ["TASK_OF_MODE", "tool_tip", "node_colors"]

TASK_OF_MODE = {"statistics": "summary", "md5": "md5", "tensor": "all", "structure": "structure"}

_TIPS = {
    "statistics": {
        "Max diff": "debug maximum minus bench maximum",
        "Min diff": "debug minimum minus bench minimum",
        "Mean diff": "debug mean minus bench mean",
        "L2norm diff": "debug L2 norm minus bench L2 norm",
    },
    "md5": {"md5": "CRC-32 checksum of the tensor's bytes; equal checksums mean identical data"},
    "tensor": {"Cosine": "", "EucDist": "", "MaxAbsErr": "", "MaxRelativeErr": "", "One Thousandth Err Ratio": "",
               "Five Thousandths Err Ratio": ""},
}
_TIPS["structure"] = _TIPS["tensor"]

_DESC = "statistics error of this node's inputs and outputs; darker means a larger debug/bench difference"
_UNMATCHED = {"#C7C7C7": {"value": [], "description": "no counterpart found on the other side",
                          "accuracy_level": "unmatched node"}}


def tool_tip(mode: str) -> Optional[Dict[str, str]]:
    return _TIPS.get(mode)


def node_colors(mode: Optional[str]) -> Optional[dict]:
    """None for a build graph (stored as 'null', as the reference does)."""
    if mode is None:
        return None
    if mode == "structure":
        return dict(_UNMATCHED)
    colors = {
        "#FFFCF3": {"value": [0, 0.3], "description": _DESC, "accuracy_level": "pass"},
        "#FFDC7F": {"value": [0.3, 0.6], "description": _DESC, "accuracy_level": "warning"},
        "#FF704D": {"value": [0.6, 1], "description": _DESC, "accuracy_level": "error"},
    }
    colors.update(_UNMATCHED)
    return colors
