"""Which records to keep: scope, list, data_mode, rank and step filters. Framework-neutral."""
from typing import Optional, Sequence

from tbprobe.collector.config import CollectorConfig

__all__ = ["NameFilter", "StepFilter"]


class NameFilter:
    """`scope` (a range between two full names, in execution order) and `list` (full names or substrings)."""

    def __init__(self, cfg: CollectorConfig) -> None:
        self.scope = list(cfg.scope)
        self.names = list(cfg.api_list)
        self.tensor_list = list(cfg.tensor_list)
        modes = set(cfg.data_mode)
        self.all_modes = "all" in modes
        self.forward = self.all_modes or "forward" in modes or not ({"forward", "backward"} & modes)
        self.backward = self.all_modes or "backward" in modes or not ({"forward", "backward"} & modes)
        self.inputs = self.all_modes or "input" in modes or not ({"input", "output"} & modes)
        self.outputs = self.all_modes or "output" in modes or not ({"input", "output"} & modes)
        self._in_scope = not self.scope
        self._scope_done = False
        self._kept_forward: set = set()

    def reset_step(self) -> None:
        self._in_scope = not self.scope
        self._scope_done = False
        self._kept_forward.clear()

    @staticmethod
    def _match(name: str, pattern: str) -> bool:
        return name == pattern

    def note_start(self, name: str) -> None:
        """A module begins: a scope opened by a module name covers everything inside it."""
        if self.scope and not self._in_scope and not self._scope_done and self._match(name, self.scope[0]):
            self._in_scope = True

    def keep(self, name: str, direction: str) -> bool:
        """Whether `name` (about to be recorded) passes scope, list and the forward/backward data_mode.

        A backward record is kept when its forward twin was kept (the scope is a range of forward calls)."""
        if direction == "backward":
            if not self.backward:
                return False
            if self.scope:
                return self._twin(name) in self._kept_forward
        elif not self.forward:
            return False
        if self.scope and direction != "backward":
            if self._scope_done:
                return False
            if not self._in_scope:
                if not self._match(name, self.scope[0]):
                    return False
                self._in_scope = True
            if self._match(name, self.scope[1]):
                self._scope_done = True
                self._in_scope = False
        if self.names and not any(n == name or n in name for n in self.names):
            return False
        if self.scope:
            self._kept_forward.add(name)
        return True

    @staticmethod
    def _twin(name: str) -> str:
        return name.replace(".backward", ".forward")

    def wants_tensor(self, name: str) -> bool:
        return any(s in name for s in self.tensor_list)


class StepFilter:
    """The `step` and `rank` lists; past the last listed step the collector is done for good."""

    def __init__(self, steps: Sequence[int], ranks: Sequence[int]) -> None:
        self.steps = set(steps)
        self.last = max(steps) if steps else None
        self.ranks = set(ranks)

    def step_wanted(self, step: int) -> bool:
        return not self.steps or step in self.steps

    def finished(self, step: int) -> bool:
        return self.last is not None and step > self.last

    def rank_wanted(self, rank: Optional[int]) -> bool:
        return not self.ranks or rank is None or rank in self.ranks
