"""module_dump(module, name) / module_dump_end(): one module recorded as one node at L1, as the reference does.

Between the two calls, `module` is recorded as `Module.<name>.<Class>.forward.<n>`, with its backward, and the
operators inside it are not. The module's hooks are put on once, at the first module_dump, and record only inside
such a window. Its backward records come whenever backward runs. At L0 and mix every module is recorded already,
so module_dump changes nothing there (one log line says so). At level debug it does nothing.
"""
import logging
from typing import Any, Callable, Optional

import torch

from tbprobe.collector.pytorch.module_hooks import ModuleHooks
from tbprobe.collector.pytorch.session import Session

__all__ = ["ModuleDumper"]

log = logging.getLogger("tbprobe.collector")


class _WindowHooks(ModuleHooks):
    """Module hooks whose forward records start only while a module_dump window is open."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.open = False

    def _pre(self, base: str, pg):
        inner = super()._pre(base, pg)

        def pre_hook(mod, args, kwargs):
            # (the post-hook records only a call whose pre-hook did)
            return inner(mod, args, kwargs) if self.open else None

        return pre_hook


class ModuleDumper:
    def __init__(self, session: Session, level: str, pause_operators: Callable[[], None],
                 resume_operators: Callable[[], None]) -> None:
        self.session = session
        self.level = level
        self._pause = pause_operators       # pops the operator capture (kept out of the module's inside)
        self._resume = resume_operators     # pushes it back if the step is being collected
        self._hooks: Optional[_WindowHooks] = None
        self._hooked: set = set()
        self._told = False

    @property
    def window_open(self) -> bool:
        return self._hooks is not None and self._hooks.open

    def start(self, module: torch.nn.Module, name: str) -> None:
        if self.level != "L1":
            if self.level in ("L0", "mix") and not self._told:
                self._told = True
                log.info("tbprobe: module_dump: level %s records every module already; nothing to add", self.level)
            return
        if self._hooks is None:
            self._hooks = _WindowHooks(self.session)
        if id(module) not in self._hooked:
            self._hooked.add(id(module))
            self._hooks._hook_module(module, f"Module.{name}.{type(module).__name__}")
        self._hooks.open = True
        self._pause()

    def end(self) -> None:
        if self._hooks is None or not self._hooks.open:
            return
        self._hooks.open = False
        self._resume()

    def detach(self) -> None:
        if self._hooks is not None:
            self._hooks.detach()
            self._hooks = None
        self._hooked = set()

    def begin_step(self) -> None:
        if self._hooks is not None:
            self._hooks.begin_step()


def check_args(module: Any, name: Any) -> Optional[str]:
    """Why module_dump's arguments are wrong, or None."""
    if not isinstance(module, torch.nn.Module):
        return f"module_dump: the module must be a torch.nn.Module, not {type(module).__name__}"
    if not isinstance(name, str) or not name:
        return "module_dump: the dump name must be a non-empty str"
    return None
