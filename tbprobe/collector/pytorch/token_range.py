"""start(model, token_range=[first, last]): in inference, collect only some of the generated tokens.

In inference each forward of the model makes one token. With a token range, only the forwards first..last
(inclusive, counted from 0 at each start()) are collected, as the reference does. The count comes from a forward
pre-hook on the model (the first one of a list), which switches collection off and on around the range.
"""
from typing import Any, Callable, Optional, Sequence

import torch

from tbprobe.collector.pytorch.own_hook import own_hook
from tbprobe.errors import TbprobeError

__all__ = ["TokenWindow", "check_root", "check_token_range"]


def check_token_range(token_range: Any) -> Optional[Sequence[int]]:
    if token_range is None:
        return None
    if (not isinstance(token_range, (list, tuple)) or len(token_range) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in token_range)):
        raise TbprobeError(f"start: token_range must be [first, last], two ints, not {token_range!r}")
    first, last = token_range
    if not 0 <= first <= last:
        raise TbprobeError(f"start: token_range must have 0 <= first <= last, not {list(token_range)}")
    return (first, last)


def check_root(model: Any) -> torch.nn.Module:
    """The module whose forwards are counted: `model`, or the first of a list (as the reference counts)."""
    root = model[0] if isinstance(model, (list, tuple)) and model else model
    if not isinstance(root, torch.nn.Module):
        raise TbprobeError("start: token_range needs the model (start(model=..., token_range=[first, last]))")
    return root


class TokenWindow:
    def __init__(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._pause = pause
        self._resume = resume
        self._range: Optional[Sequence[int]] = None
        self._count = 0
        self._hooked: dict = {}      # id(model) -> its hook's handle

    def arm(self, root: torch.nn.Module, token_range: Sequence[int]) -> None:
        """At start(): count `root`'s forwards (check_root's module) from 0, collecting those in `token_range`."""
        if id(root) not in self._hooked:
            self._hooked[id(root)] = root.register_forward_pre_hook(own_hook(self._on_forward))
        self._range = token_range
        self._count = 0

    def disarm(self) -> None:
        """At stop(): forwards are no longer counted until the next start() with a range."""
        self._range = None

    def remove(self) -> None:
        for handle in self._hooked.values():
            handle.remove()
        self._hooked = {}
        self._range = None

    def _on_forward(self, module: Any, args: Any) -> None:
        if self._range is None:
            return
        first, last = self._range
        i = self._count
        self._count += 1
        if first <= i <= last:
            self._resume()
        else:
            self._pause()
