"""own_hook(fn, *args): the collector's hooks on the user's modules and parameters, which travel with them.

A model hooked by start() may be pickled (`torch.save(model)`, a checkpoint mid-run) or deep-copied (an EMA copy,
a frozen reference model) while training runs. A closure or a bound method of tbprobe's cannot be pickled, so
torch.save(model) raised into the user's code; and a deep copy kept calling tbprobe's hooks, the copy's calls
recorded under the original's names. A hook made by own_hook is a functools.partial (no Python frame of its own
on the hook path) that pickles and copies as a hook doing nothing, made of the standard library alone (a
checkpoint saved during collection loads where tbprobe is not installed): the copy is not the model that
start() was given.

The copied hook keeps its place, and its id, in the module's hook dicts, and with it its entries in
`_forward_hooks_with_kwargs` / `_forward_hooks_always_called`. A fresh process numbers hooks from 0 again: a hook
the user (or tbprobe) put on the loaded model later could get a copied hook's id, and torch called it with that
hook's kwargs signature (a TypeError in the user's forward). So the copy also carries a RemovableHandle made when
it was copied, whose id is past every hook's so far: unpickling one moves torch's hook counter past that id
(torch.utils.hooks.RemovableHandle's own __setstate__), and no later hook takes an id in use.
"""
import functools
import sys
from collections import OrderedDict
from typing import Any, Callable

from torch.utils.hooks import RemovableHandle

__all__ = ["own_hook"]


class _OwnHook(functools.partial):
    __slots__ = ()

    def __reduce__(self) -> tuple:   # (copy.deepcopy and copy.copy take it too)
        # what a copied hook becomes: sys.audit(event, *args) returns None for any arguments (a pre-hook or
        # forward hook returning None leaves the call as it is), and does nothing unless an audit hook is
        # installed; the handle (a dead one: no dict) is only there to be unpickled
        last = RemovableHandle(OrderedDict())   # (the next id: past every hook's so far)
        return functools.partial, (sys.audit, "tbprobe.copied_hook", last)


def own_hook(fn: Callable, *args: Any) -> Callable:
    """`fn` (with `args` first) as a hook that pickles and copies as one doing nothing."""
    return _OwnHook(fn, *args)
