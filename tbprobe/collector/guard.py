"""Hook exceptions are caught, counted and logged once per kind: the training run never sees them."""
import logging
from collections import Counter
from typing import Any, Callable

__all__ = ["HookGuard"]

log = logging.getLogger("tbprobe.collector")


class HookGuard:
    def __init__(self) -> None:
        self.counts: Counter = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self, where: str, exc: BaseException) -> None:
        kind = f"{where}: {type(exc).__name__}"
        self.counts[kind] += 1
        if self.counts[kind] == 1:
            log.warning("tbprobe: error in %s (%s: %s); it is counted and skipped from now on, training continues",
                        where, type(exc).__name__, exc)

    def call(self, where: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self.report(where, exc)
            return None
