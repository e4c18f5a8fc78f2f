"""IterTimerHook: data time, step time and ETA for the log and writers."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

from ..registry import HOOKS
from .base import Hook


@HOOKS.register()
class IterTimerHook(Hook):
    """Measures data time and step time per step and an ETA, into ``trainer.runtime_info``.

    Keys: ``time/data`` (s spent getting the batch), ``time/step`` (s per whole step,
    validation excluded), ``time/eta`` (s to the last step, from a running mean).

    Its priority (95) puts its ``after_train_iter`` after the logging and checkpoint
    hooks, so their time counts in the step.

    Args:
        momentum: weight of the old value in the running mean of step time.
    """

    priority = 95

    def __init__(self, momentum: float = 0.9) -> None:
        super().__init__()
        self.momentum = momentum
        self._last_end: Optional[float] = None
        self.mean_step: Optional[float] = None

    def before_train(self, trainer) -> None:
        self._last_end = time.perf_counter()

    def before_train_iter(self, trainer, step: int, batch: Dict[str, Any]) -> None:
        if self._last_end is not None:
            trainer.runtime_info["time/data"] = time.perf_counter() - self._last_end

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        now = time.perf_counter()
        if self._last_end is not None:
            elapsed = now - self._last_end
            self.mean_step = elapsed if self.mean_step is None else (
                self.momentum * self.mean_step + (1.0 - self.momentum) * elapsed
            )
            trainer.runtime_info["time/step"] = elapsed
            trainer.runtime_info["time/eta"] = self.mean_step * (trainer.max_steps - step)
        self._last_end = now

    def on_pause(self, trainer, paused: bool) -> None:
        """Time spent paused (in the viewer) is not data time of the next step."""
        if not paused:
            self._last_end = time.perf_counter()

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        self._last_end = time.perf_counter()  # validation is not data time of the next step
