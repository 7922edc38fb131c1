"""Node names exactly as the reference writes them, and the call counters behind them. Framework-neutral."""
from typing import Dict

__all__ = ["Counters", "module_name", "api_name", "params_grad_name"]


def module_name(prefix: str, path: str, cls: str, direction: str, index: int) -> str:
    """`Module.<path>.<Class>.<forward|backward>.<call>` (MindSpore: prefix "Cell")."""
    return f"{prefix}.{path}.{cls}.{direction}.{index}"


def api_name(prefix: str, api: str, index: int, direction: str) -> str:
    """`<Prefix>.<api>.<call>.<forward|backward>`, e.g. `Torch.matmul.5.forward`."""
    return f"{prefix}.{api}.{index}.{direction}"


def params_grad_name(module_prefix: str, index: int) -> str:
    """`<module prefix>.parameters_grad.<N>`, e.g. `Module.fc.Linear.parameters_grad.0`."""
    return f"{module_prefix}.parameters_grad.{index}"


class Counters:
    """Per-key call counters; reset at every step, as the reference does."""

    def __init__(self) -> None:
        self._n: Dict[str, int] = {}

    def next(self, key: str) -> int:
        n = self._n.get(key, 0)
        self._n[key] = n + 1
        return n

    def peek(self, key: str) -> int:
        """The index the next `next(key)` returns."""
        return self._n.get(key, 0)

    def reset(self) -> None:
        self._n.clear()
