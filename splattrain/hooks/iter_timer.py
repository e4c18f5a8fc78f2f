"""IterTimerHook: the engine's step times in ``trainer.runtime_info``, for the log and writers."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook, Priority


@HOOKS.register()
class IterTimerHook(Hook):
    """Publishes the engine's clock (``trainer.clock``) into ``trainer.runtime_info`` each step;
    it times nothing itself.

    Keys: ``time/data`` (s spent getting the batch), ``time/step`` (s per whole step, validation
    and pauses excluded), ``time/eta`` (s to the last step, from the running mean).

    Its priority (10) runs it before the logging hooks, so they write this step's times.

    Args:
        momentum: no longer an option: the engine keeps the running mean (0.9 old + 0.1 new);
            a config that sets it is refused, naming ``trainer.clock``.
    """

    priority = Priority.VERY_HIGH

    def __init__(self, momentum: Optional[float] = None) -> None:
        super().__init__()
        if momentum is not None:
            raise ConfigError("IterTimerHook momentum: the engine keeps the mean step time "
                              "(trainer.clock, 0.9 old + 0.1 new); remove the option")

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        clock = trainer.clock
        trainer.runtime_info["time/data"] = clock.data_seconds
        trainer.runtime_info["time/step"] = clock.step_seconds
        trainer.runtime_info["time/eta"] = clock.eta_seconds
