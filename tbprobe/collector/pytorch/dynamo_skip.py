"""Keeps torch.compile from compiling tbprobe's own frames.

Inside a compiled function dynamo's frame hook stays on for the code that runs eagerly between graphs, so a Python
function of tbprobe called from C there (the operator mode's handler, the module and gradient hooks) was compiled as
a frame of its own, specialised to its arguments. Its guards do not tell Tensor methods apart: `x.exp()` compiled
the handler once, and sin, cos, sum ... ran that code, each recorded as `Tensor.exp.<n>`. Every function of
tbprobe's collector is left to run eagerly instead (dynamo still inlines what a traced frame calls, as before).
Dynamo is a large import: this is done once it is imported, checked at each start().
"""
import sys
import types
from typing import Any, Callable, Set

__all__ = ["keep_own_frames_eager"]

_OWN_PACKAGES = ("tbprobe.collector", "tbprobe.monitor")
_done = False


def keep_own_frames_eager() -> None:
    """Mark every code object of tbprobe's collector and monitor as one dynamo never compiles (once dynamo is
    imported; a no-op before, and after the first time)."""
    global _done
    if _done or "torch._dynamo" not in sys.modules:
        return
    _done = True
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:
        return
    seen: Set[int] = set()
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(_OWN_PACKAGES):
            for obj in list(vars(module).values()):
                if getattr(obj, "__module__", None) == name:
                    _skip_object(obj, skip_code, seen)


def _skip_object(obj: Any, skip_code: Callable, seen: Set[int]) -> None:
    if isinstance(obj, type):
        for member in list(vars(obj).values()):
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                for f in (member.fget, member.fset, member.fdel):
                    if f is not None:
                        _skip_object(f, skip_code, seen)
            elif isinstance(member, (types.FunctionType, type)):
                _skip_object(member, skip_code, seen)
        return
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        _skip_code_tree(code, skip_code, seen)


def _skip_code_tree(code: types.CodeType, skip_code: Callable, seen: Set[int]) -> None:
    """The code and the code of every function defined inside it (hooks made as closures)."""
    if id(code) in seen:
        return
    seen.add(id(code))
    skip_code(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _skip_code_tree(const, skip_code, seen)
