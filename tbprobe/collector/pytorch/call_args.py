"""The arguments of a torch.nn.functional call as its caller wrote them (the reference records them so).

torch.nn.functional's Python functions hand every parameter to the operator mode as a keyword, the defaults too;
the call site (call_site.py) tells which were written by position and which by keyword.
"""
import inspect
import types
from typing import Any, Dict, Optional

import torch

from tbprobe.collector.pytorch.call_site import written_call

__all__ = ["as_called"]

_SIGNATURES: Dict[object, Optional[list]] = {}
_BOOLEAN_DISPATCHED = getattr(torch._jit_internal, "boolean_dispatched", None)


def _is_default(v: Any, default: Any) -> bool:
    if v is default:
        return True
    return isinstance(v, (bool, int, float, str)) and type(v) is type(default) and v == default


def as_called(func, args: tuple, kwargs: dict):
    """torch.nn.functional's Python functions hand every parameter to the mode as a keyword, the defaults too.
    The call as written comes from the caller's call instruction (call_site.py). Where that cannot be read (a call
    through *args, a functools.partial), a plausible call: positional-or-keyword parameters back into positions,
    then the trailing ones (and keyword-only ones) left at their default dropped, so `F.mse_loss(a, b)` records two
    arguments as the reference does."""
    params = _SIGNATURES.get(func, 0)
    if params == 0:
        params = None
        if isinstance(func, types.FunctionType):
            # F.max_pool2d and the other boolean-dispatched functions take (*args, **kwargs) and hand them to one of
            # two functions of the same parameters, whose signature is the call's
            dispatched = _BOOLEAN_DISPATCHED.get(func) if _BOOLEAN_DISPATCHED is not None else None
            try:
                params = list(inspect.signature(dispatched["if_false"] if dispatched else func).parameters.values())
            except (TypeError, ValueError, KeyError):
                params = None
        _SIGNATURES[func] = params
    if not params:
        return args, kwargs
    site = written_call(func.__code__)
    if site is not None:
        n_pos, names, on_value = site
        if on_value and func.__qualname__.startswith("Tensor."):
            n_pos += 1      # `x.norm(2, dim=1)`: x is the method's first argument, by position
        written = _as_written(params, args, kwargs, n_pos, names)
        if written is not None:
            return written
    pos = list(args)
    rest = dict(kwargs)
    defaults = []
    for p in params[len(args):]:
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name in rest:
            pos.append(rest.pop(p.name))
            defaults.append(p.default)
        else:
            break
    n_given = len(args)
    while len(pos) > n_given and _is_default(pos[-1], defaults[len(pos) - n_given - 1]):
        pos.pop()
    for p in params:
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in rest and _is_default(rest[p.name], p.default):
            del rest[p.name]
    return pos, rest


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _as_written(params: list, args: tuple, kwargs: dict, n_pos: int, names: tuple):
    """The call as its call site wrote it (`n_pos` arguments by position, then `names` by keyword), the values
    from the mode's args and kwargs; None where the site cannot be this call's: every parameter given a value other
    than its default must be written there (else a functools.partial or a C function stood between)."""
    if len(args) > len(params) or any(p.kind in _VARIADIC for p in params):
        return None
    bound = {p.name: a for p, a in zip(params, args)}
    for k, v in kwargs.items():
        if k in bound:
            return None
        bound[k] = v
    positional = [p for p in params if p.kind in _POSITIONAL]
    if n_pos > len(positional) or any(p.name not in bound for p in positional[:n_pos]):
        return None
    pos = [bound[p.name] for p in positional[:n_pos]]
    written = {p.name for p in positional[:n_pos]}
    if any(n not in bound or n in written for n in names):
        return None
    kw = {n: bound[n] for n in names}
    written.update(names)
    for p in params:
        if p.name in bound and p.name not in written and (
                p.default is inspect.Parameter.empty or not _is_default(bound[p.name], p.default)):
            return None
    return pos, kw
