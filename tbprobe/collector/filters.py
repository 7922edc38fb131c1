"""Which records to keep: scope, list, data_mode, rank and step filters. Framework-neutral."""
from typing import List, Optional, Sequence, Tuple

from tbprobe.collector.config import CollectorConfig

__all__ = ["NameFilter", "StepFilter"]


class NameFilter:
    """`scope` (a range between two full names, in execution order) and `list` (full names or substrings), with the
    reference's semantics, checked against msprobe's dumps call by call (tests/collector/test_peers.py):

    - a scope opens when the call named by its first name begins and closes when the call named by its second name
      ends. A module's call begins and ends around everything inside it (its forward, or its backward for a
      `.backward.` name), so at L0 a range of two modules holds both and all they contain; an operator's call is
      the record itself. At mix a range that ends with a module's forward closes as soon as that module starts
      (what is inside it is left out), as the reference does. Every record made while the range is open
      is kept, forward and backward alike: a range of forward names keeps no backward records, and a range of
      backward names keeps the backward pass's;
    - a module's `parameters_grad` goes with its backward record (kept when that record was, by the scope or by
      the list: `list: ["Module.fc1.Linear.backward.0"]` keeps fc1's parameter gradients too);
    - a list entry keeps every record whose name contains it; at mix, a module whose name contains it also keeps
      every record made while it runs (the operators inside a listed module, forward and backward).

    The hooks report `note_start(name)` / `note_end(name)` when a module's forward or backward begins and ends;
    `keep(name, direction)` is asked once per record, in execution order."""

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
        # at mix a listed module opens a region: the answer for a name then depends on when it is asked
        self.regions = cfg.level == "mix" and bool(self.names)
        self._close_at_record = cfg.level == "mix"   # (see the class's note on scopes)
        # whether keep()'s answer depends on the call order, not on the name alone (the session then asks anew in
        # every step)
        self.contextual = bool(self.scope) or self.regions
        self._in_scope = False
        self._open: List[str] = []      # listed modules running now (regions)
        self._backward_kept: set = set()   # modules whose backward record was kept in this step

    def reset_step(self) -> None:
        self._in_scope = False
        self._open = []
        self._backward_kept = set()

    def _listed(self, name: str) -> bool:
        return any(n in name for n in self.names)

    def _inside_open(self, name: str) -> bool:
        """Whether `name` is made inside a listed module running now. A module around that one is not: a module
        whose output is its last inner module's begins its backward on the same autograd node, after the inner
        one's (the engine runs the hooks in the order the forward ended), but runs around it, as in the
        reference, whose outer hook comes first."""
        if not self._open:
            return False
        if not _is_module(name):
            return True
        path = _module_path(name) + "."
        return any(not _module_path(o).startswith(path) for o in self._open)

    def note_start(self, name: str) -> None:
        """A module's forward or backward call `name` begins."""
        if self.scope and name == self.scope[0]:
            self._in_scope = True
        if self.regions and self._listed(name):
            self._open.append(name)

    def note_end(self, name: str) -> None:
        """A module's forward or backward call `name` ends (a call that raised ends too)."""
        if self.scope and name == self.scope[1]:
            self._in_scope = False
        if self._open and name in self._open:
            self._open.remove(name)

    def keep(self, name: str, direction: str) -> bool:
        """Whether the record `name` (about to be made) passes scope, list and the forward/backward data_mode."""
        return self.judge(name, direction)[0]

    def judge(self, name: str, direction: str) -> Tuple[bool, bool]:
        """(keep(name, direction), whether `name` passes scope and list): a forward call that data_mode leaves
        out still has its stack in stack.json when it passes them, as in the reference, where data_mode only
        decides what a record holds."""
        wanted = self.backward if direction == "backward" else self.forward
        selected = self._selected(name)
        return wanted and selected, selected

    def _selected(self, name: str) -> bool:
        if ".parameters_grad." in name and name.rsplit(".parameters_grad.", 1)[0] in self._backward_kept:
            # a module's parameter gradients go with its backward record, kept by the scope or by the list, as the
            # reference keeps them (a module whose input needs no gradient ends its backward before they arrive)
            return True
        if self.scope:
            if name == self.scope[0]:
                self._in_scope = True   # (an operator's name: its record is its whole call)
            inside = self._in_scope
            if name == self.scope[1] and (not _is_module(name) or (self._close_at_record and ".forward." in name)):
                self._in_scope = False
            if not inside:
                return False
        if self.names and not (self._inside_open(name) or self._listed(name)):
            return False
        if ".backward." in name and _is_module(name):
            self._backward_kept.add(name.rsplit(".backward.", 1)[0])
        return True

    def wants_tensor(self, name: str) -> bool:
        return any(s in name for s in self.tensor_list)


def _module_path(name: str) -> str:
    """`Module.a.b` of a module call's name `Module.a.b.<Class>.<forward|backward>.<n>`."""
    return name.rsplit(".", 3)[0]


def _is_module(name: str) -> bool:
    """A module's call (`Module.<path>.<Class>.forward.<n>`, MindSpore's `Cell.`), which ends in note_end."""
    return name.startswith(("Module.", "Cell."))


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
