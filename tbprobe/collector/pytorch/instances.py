"""Which debugger a call acts on. The reference has one debugger per process, and its users write code for that.

- **The debugger made last** is the one that module_dump()/module_dump_end() act on, and the one that
  `PrecisionDebugger.step()` and the other calls act on when called on the class, as the reference's
  classmethods allow.
- **One debugger per dump path:** constructing a PrecisionDebugger with the dump path of one that is still open
  gives that one back. Two would hook the model twice and write the same step folders. Debuggers with other
  dump paths stay independent, as tbprobe's own side-by-side benchmarks need.
"""
import functools
import os
import types
import weakref
from typing import Any, Callable, Dict, Optional

from tbprobe.errors import TbprobeError

__all__ = ["register", "open_for", "latest", "on_latest", "module_dump", "module_dump_end"]

_latest: Optional[weakref.ReferenceType] = None
_by_path: Dict[str, weakref.ReferenceType] = {}     # realpath(dump_path) -> debugger


def register(debugger: Any, dump_path: str) -> None:
    """A new debugger: the latest one, and the one of its dump path."""
    global _latest
    for path in [p for p, ref in _by_path.items() if ref() is None]:   # (debuggers gone: a process making
        del _by_path[path]                                              # many, a test suite, keeps no trail)
    _latest = weakref.ref(debugger)
    _by_path[os.path.realpath(dump_path)] = _latest


def open_for(dump_path: str) -> Optional[Any]:
    """The debugger of `dump_path` if it is still open (not closed, not past its last step)."""
    ref = _by_path.get(os.path.realpath(dump_path))
    debugger = ref() if ref is not None else None
    return debugger if debugger is not None and not debugger._finished else None


def latest(what: str) -> Any:
    debugger = _latest() if _latest is not None else None
    if debugger is None:
        raise TbprobeError(f"{what}: create a PrecisionDebugger first")
    return debugger


class on_latest:  # noqa: N801 (used as a decorator, like a function)
    """A method that can also be called on the class: it then acts on the debugger made last."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, cls: Any = None) -> Callable:
        if obj is not None:
            return types.MethodType(self.fn, obj)
        fn = self.fn

        # (the debugger is looked up when called, not when the attribute is read: hasattr(), help() and
        # introspection work before any debugger exists)
        @functools.wraps(fn)
        def on_class(*args: Any, **kwargs: Any) -> Any:
            return fn(latest(f"PrecisionDebugger.{fn.__name__}"), *args, **kwargs)

        return on_class


def module_dump(module: Any, dump_name: str) -> None:
    """The reference's module_dump(module, dump_name), on the debugger made last (module_dump.py)."""
    latest("module_dump").module_dump(module, dump_name)


def module_dump_end() -> None:
    """The reference's module_dump_end(), on the debugger made last."""
    latest("module_dump_end").module_dump_end()
