"""stack.json's stacks: a call's key is made in C (_cstats_stack.h) from the running frames, as plain ints; its
lines are worked out once per distinct key. tbprobe's own frames are left out, decided once per code object."""
import linecache
import os
from typing import Any, Dict, List, Optional

import torch

__all__ = ["CODES", "OWN_CODE", "TBPROBE_DIR", "format_stack"]

# (as imported, not normalised: a code object's co_filename is its module's path as imported, which holds "/../"
# when sys.path does, and a normalised prefix left tbprobe's own wrappers in every operator's stack)
TBPROBE_DIR = os.path.dirname(os.path.dirname(__file__))
OWN_CODE: Dict[int, Optional[bool]] = {}   # id(code object) -> whether it is tbprobe's own (left out of stacks)
CODES: Dict[int, Any] = {}       # id(code object) -> the code object
# (None: a dispatch frame, left out with the frames above it that repeat a body run again: _cstats_stack.h)
_DISPATCH_CODE = torch.overrides.handle_torch_function.__code__
OWN_CODE[id(_DISPATCH_CODE)], CODES[id(_DISPATCH_CODE)] = None, _DISPATCH_CODE


def _line_of(code: Any, lasti: int) -> int:
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _handed_on(code: Any) -> bool:
    """Whether `code` is the handler of one of torch's own torch-function modes, which hands a call on to the next
    mode (transformers' attention masks are built under torch._dynamo's TransformGetItemToIndex)."""
    return code.co_name == "__torch_function__" and code.co_filename.startswith(_TORCH_DIR)


def format_stack(key: tuple) -> List[str]:
    """Lines of a stack key (id(code), bytecode offset, id(code), offset, ...), innermost first. The handlers of
    torch's own modes that handed the call on to tbprobe's are left out of its start: the reference, which wraps
    the function, sees the call at its caller. (Here, once per distinct stack, rather than in every call's walk.)
    A frame whose source line cannot be read (`python -c`'s and multiprocessing spawn's `<string>`, a file deleted
    since) is left out, as the reference leaves it out."""
    lines = []
    start = 0
    while start < len(key) - 2 and _handed_on(CODES[key[start]]):
        start += 2
    for i in range(start, len(key), 2):
        code = CODES[key[i]]
        lineno = _line_of(code, key[i + 1])
        src = linecache.getline(code.co_filename, lineno).strip()
        if not src:
            continue
        lines.append(f"File {code.co_filename}, line {lineno}, in {code.co_name}, \n {src}")
    return lines
