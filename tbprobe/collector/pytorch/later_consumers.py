"""Module outputs the module also uses itself (an MoE block's router logits, T5's position bias): their backward
"input" is what the consumers after the call send, as the reference reports it, not the sum with the module's
own use (tbprobe/collector/_cgrad_watch.h says how).

Those consumers exist once the forward pass is over, and a backward pass's roots reach all of them. So while a
step has such an output, torch.autograd.backward and torch.autograd.grad (which loss.backward() calls) are
wrapped: just before the pass, _cgrad.discover walks from its roots and hooks them. The wrappers exist only from
the step's first such output to its end (Session.end_step), so a step without one runs torch's functions as they
are.
"""
import functools
import itertools
from typing import Any, Callable, Dict, Optional

import torch

__all__ = ["install", "uninstall"]

try:
    from tbprobe.collector._cgrad import clear_watches, discover, drop_seeds, watching
except ImportError:   # (without the extension no output is watched: module_hooks' views are used instead)
    clear_watches = discover = drop_seeds = watching = None

_tokens = itertools.count(1)   # one per wrapped call: the root gradients it gave the watches (_discover)

_ORIGINALS: Dict[str, Callable] = {}   # name -> torch's function, while the wrappers are installed
_MADE: Dict[tuple, Callable] = {}       # (name, torch's function) -> its wrapper, made once
_report: Optional[Callable[[str, BaseException], None]] = None


def install(report: Callable[[str, BaseException], None]) -> None:
    """Wrap torch.autograd.backward and .grad (once; `report(what, exc)` counts an error of the walk, which never
    reaches the user's backward)."""
    global _report
    _report = report
    if _ORIGINALS or discover is None:
        return
    for name, roots_kw, grads_at, grads_kw in (("backward", "tensors", 1, "grad_tensors"),
                                               ("grad", "outputs", 2, "grad_outputs")):
        orig = getattr(torch.autograd, name)
        _ORIGINALS[name] = orig
        wrapper = _MADE.get((name, orig))
        if wrapper is None:    # (made once per function: a step with a watched output installs them anew)
            wrapper = _MADE[(name, orig)] = _wrap(orig, roots_kw, grads_at, grads_kw)
        setattr(torch.autograd, name, wrapper)


def uninstall() -> None:
    """Put torch's functions back, and forget the step's watched outputs."""
    for name, orig in _ORIGINALS.items():
        if getattr(torch.autograd, name) is _MADE[(name, orig)]:   # (what another tool put there since stays)
            setattr(torch.autograd, name, orig)
    _ORIGINALS.clear()
    if clear_watches is not None:
        clear_watches()


def _wrap(orig: Callable, roots_kw: str, grads_at: int, grads_kw: str) -> Callable:
    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = next(_tokens)
        seeded = _discover(args[0] if args else kwargs.get(roots_kw),
                           args[grads_at] if len(args) > grads_at else kwargs.get(grads_kw),
                           token, kwargs.get("is_grads_batched", False))
        try:
            return orig(*args, **kwargs)
        finally:
            if seeded:
                _drop(token)

    return wrapper


def _discover(roots: Any, grads: Any, token: int, batched: bool) -> bool:
    """Before a pass from `roots` with gradients `grads` (as torch takes them: one, a sequence, or None): the
    roots' gradients go to the watched outputs among the roots (a root's gradient comes from no consumer), unless
    they are batched (`is_grads_batched`: one gradient per row of their first dimension). Whether it ran."""
    try:
        if watching():
            roots = list(roots) if isinstance(roots, (list, tuple)) else [roots]
            if grads is not None:
                grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
                if len(grads) != len(roots):
                    grads = None   # (torch refuses the call itself)
            if batched:
                grads = [False] * len(roots)   # (no seed: neither a tensor nor None)
            discover(roots, grads, token)
            return True
    except Exception as exc:
        if _report is not None:
            _report("watched outputs", exc)
    return False


def _drop(token: int) -> None:
    try:
        drop_seeds(token)
    except Exception as exc:
        if _report is not None:
            _report("watched outputs", exc)
