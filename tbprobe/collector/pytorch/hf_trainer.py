"""transformers' Trainer: a callback that makes each optimizer step one collected step.

Trainer calls `on_step_begin` before the first micro-batch of an optimizer step and `on_step_end` after the
optimizer's step, so gradient accumulation's micro-batches land in one step, as in a hand-written loop that calls
start before its first forward and stop/step after `optimizer.step()`. Evaluation runs outside those two calls and
is not collected. transformers is imported only when the callback is made: tbprobe does not depend on it.
"""
from typing import Any

from tbprobe.errors import TbprobeError

__all__ = ["trainer_callback"]


def trainer_callback(debugger: Any) -> Any:
    """A `transformers.TrainerCallback` driving `debugger` (see the top)."""
    try:
        import transformers
    except ImportError as exc:
        raise TbprobeError(f"trainer_callback() needs transformers, which is not importable: {exc}") from None

    class TbprobeCallback(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            debugger.start(model=model)

        def on_step_end(self, args, state, control, **kwargs):
            debugger.stop()
            debugger.step()

    return TbprobeCallback()
