"""How a call of a Python function was written: how many arguments by position, which by keyword, read off the
caller's bytecode.

torch.nn.functional's Python functions hand every parameter to the operator mode as a keyword, defaults included
(`handle_torch_function(softmax, (input,), input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)`), so the mode
alone cannot tell `F.softmax(x, 1)` from `F.softmax(x, dim=1)`; the reference, which wraps the function itself,
records the call as written. While the function runs, the frame that called it is stopped at its call
instruction, whose argument count and keyword names say how the call was written. Read once per call site
(code object and instruction offset) and kept.
"""
import dis
import sys
from typing import Any, Dict, Optional, Tuple

__all__ = ["written_call"]

# (id(code), offset) -> (number of positional arguments, keyword names), or None where the call site says nothing
# exact (a call through *args/**kwargs, a C function in between)
_SITES: Dict[Tuple[int, int], Optional[Tuple[int, tuple, bool]]] = {}
_CODES: Dict[int, Any] = {}   # id(code) -> code: the ids in _SITES stay valid
_CALLS = frozenset(("CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW", "CALL_FUNCTION_KW"))
_SKIP = frozenset(("CACHE", "PRECALL", "EXTENDED_ARG", "NOP"))
_MAX_DEPTH = 8
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_LOADS = frozenset(("LOAD_NAME", "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_FAST", "LOAD_DEREF"))


def written_call(code: Any) -> Optional[Tuple[int, tuple, bool]]:
    """(positional count, keyword names, whether the callee was an attribute of a value) of the call that started
    the running frame of `code` (found within a few frames above the caller), or None where that cannot be read.
    The count leaves out the value a method is looked up on: `x.norm(2, dim=1)` is (1, ("dim",), True)."""
    f = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if f is None:
            return None
        if f.f_code is code:
            break
        f = f.f_back
    else:
        return None
    caller = f.f_back
    if caller is None:
        return None
    key = (id(caller.f_code), caller.f_lasti)
    try:
        return _SITES[key]
    except KeyError:
        pass
    _CODES[key[0]] = caller.f_code
    site = _SITES[key] = _read(caller.f_code, caller.f_lasti)
    return site


def _read(code: Any, offset: int) -> Optional[Tuple[int, tuple, bool]]:
    try:
        ins = list(dis.get_instructions(code))
    except Exception:
        return None
    # (f_lasti may point into the call's inline cache, which get_instructions leaves out: the last instruction
    # that starts at or before it)
    at = next((k for k in range(len(ins) - 1, -1, -1) if ins[k].offset <= offset), None)
    if at is None or ins[at].opname not in _CALLS or ins[at].arg is None:
        return None
    call, argc = ins[at].opname, ins[at].arg
    k = at - 1
    while k >= 0 and ins[k].opname in _SKIP:
        k -= 1
    names: tuple = ()
    if call in ("CALL_KW", "CALL_FUNCTION_KW"):     # (3.13; 3.9-3.10: the names are the constant loaded last)
        if k < 0 or ins[k].opname != "LOAD_CONST" or not isinstance(ins[k].argval, tuple):
            return None
        names = ins[k].argval
    elif k >= 0 and ins[k].opname == "KW_NAMES":    # (3.11-3.12)
        names = code.co_consts[ins[k].arg]
    if not isinstance(names, tuple) or len(names) > argc:
        return None
    return argc - len(names), names, _attribute_of_value(ins, k if names else at, argc)


def _attribute_of_value(ins: list, end: int, argc: int) -> bool:
    """Whether the callee was looked up as an attribute of a value (`x.norm(...)`, self passed ahead of the
    arguments) rather than of a class written `Tensor` (`Tensor.norm(x, ...)`) or called by name. The arguments'
    instructions are walked back by their stack effects to the one that loaded the callee; code with jumps in
    between (a conditional argument) is not walked, and reads as not an attribute."""
    depth = 0
    k = end - 1
    while k >= 0 and ins[k].opname in _SKIP | {"PRECALL", "KW_NAMES"}:
        k -= 1
    while k >= 0 and depth < argc:
        i = ins[k]
        if i.opcode in _JUMPS:
            return False
        try:
            depth += dis.stack_effect(i.opcode, i.arg if i.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return False
        k -= 1
    if k < 1 or depth != argc or ins[k].opname not in ("LOAD_METHOD", "LOAD_ATTR"):
        return False
    receiver = ins[k - 1]
    return not (receiver.opname in _LOADS and receiver.argval == "Tensor")
