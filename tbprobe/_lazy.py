"""Package attributes imported on first use: `import tbprobe` (and the TensorBoard plugin, which imports
tbprobe's sub-packages) must not import torch."""
import importlib
import sys
from typing import Any, Callable, Dict, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, names: Dict[str, Tuple[str, str]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `names[attr] = (module, name)` when first asked for,
    then keeps it in the package's namespace so later lookups are plain attribute reads."""
    namespace = sys.modules[package].__dict__

    def __getattr__(attr: str) -> Any:
        if attr not in names:
            raise AttributeError(f"module {package!r} has no attribute {attr!r}")
        module_name, name = names[attr]
        value = getattr(importlib.import_module(module_name), name)
        namespace[attr] = value
        return value

    return __getattr__
