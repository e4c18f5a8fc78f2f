"""EarlyStoppingHook: end the run when a validation metric stops improving."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple, Union

from ..errors import ConfigError
from ..registry import HOOKS
from . import state as state_values
from .base import Hook, Priority
from .splits import check_split, metric_key
from ..protocol import Trainer

#: The direction of improvement of the built-in metrics (``mode: auto``).
_MAXIMISED = {"psnr": True, "cc_psnr": True, "ssim": True, "lpips": False}


@HOOKS.register()
class EarlyStoppingHook(Hook):
    """Asks the trainer to stop when ``monitor`` has not improved for ``patience`` validations.

    Improving means beating the best value so far by more than ``min_delta`` (up for ``mode: max``,
    down for ``min``; ``auto`` knows psnr, cc_psnr, ssim: max, lpips: min). The run then ends
    after the current step with its checkpoint and ``results.json`` saying ``stopped``. The best
    value, its step and the count of validations without improvement are kept in checkpoints, so a
    resumed run goes on counting. Every rank sees the same metrics, so all ranks decide alike.
    With ``split: val`` it follows the views ``data.val_split`` holds out of training (``val_psnr``,
    ...), so a run that starts to over-fit stops without the test views deciding it.

    Args:
        monitor: a key of the validation metrics (psnr, cc_psnr, ssim, lpips).
        mode: ``max``, ``min`` or ``auto``.
        patience: validations without improvement before stopping (at least 1).
        min_delta: how much better than the best a value must be to count (finite, >= 0).
        split: ``test`` (the test views' metrics) or ``val`` (the held-out validation views';
            needs ``data.val_split``).
    """

    priority = Priority.LOW

    def __init__(self, monitor: str = "psnr", mode: str = "auto", patience: int = 3, min_delta: float = 0.0,
                 split: str = "test", priority: Union[int, str, None] = None) -> None:
        super().__init__(priority)
        self.key = metric_key(monitor, split, "EarlyStoppingHook")
        if mode not in ("max", "min", "auto"):
            raise ConfigError(f"EarlyStoppingHook mode {mode!r}: use 'max', 'min' or 'auto'")
        if mode == "auto" and monitor not in _MAXIMISED:
            raise ConfigError(f"EarlyStoppingHook monitor {monitor!r}: give mode: max or min for this metric")
        if patience < 1:
            raise ConfigError(f"EarlyStoppingHook patience must be at least 1, got {patience}")
        if not (math.isfinite(min_delta) and min_delta >= 0):  # NaN compares false with everything
            raise ConfigError(f"EarlyStoppingHook min_delta must be a finite number >= 0, got {min_delta}")
        self.monitor, self.patience, self.min_delta = monitor, patience, min_delta
        self.maximise = _MAXIMISED[monitor] if mode == "auto" else mode == "max"
        self.best: Optional[float] = None
        self.best_step = 0
        self.bad_validations = 0
        self.last_step = -1  # a step validated again (on resume, at the end) is counted once

    def required_metrics(self) -> Tuple[str, ...]:
        return (self.monitor,)

    def check(self, trainer: Trainer) -> None:
        check_split(self.key, trainer)

    def improved(self, value: float) -> bool:
        """Whether ``value`` beats the best so far by more than ``min_delta``."""
        if self.best is None:
            return True
        return value > self.best + self.min_delta if self.maximise else value < self.best - self.min_delta

    def after_val(self, trainer: Trainer, metrics: Dict[str, Any]) -> None:
        if self.key not in metrics:
            raise ConfigError(f"EarlyStoppingHook monitor {self.monitor!r}: the validation has no {self.key} "
                              f"(it has: {', '.join(k for k in metrics if k != 'step')})")
        step = int(metrics.get("step", trainer.step))
        if step <= self.last_step:
            return
        if metrics[self.key] is None:  # not computed this time: neither better nor worse
            trainer.console.warning(f"EarlyStoppingHook: no {self.key} in the validation at step {step}; "
                                    "not counted", once=f"early_stopping_{self.key}")
            return
        self.last_step, value = step, float(metrics[self.key])
        if self.improved(value):
            self.best, self.best_step, self.bad_validations = value, step, 0
            return
        self.bad_validations += 1
        if self.bad_validations >= self.patience:
            trainer.request_stop(
                f"early stopping: {self.key} did not improve by more than {self.min_delta:g} in "
                f"{self.bad_validations} validations (best {self.best:.4f} at step {self.best_step})"
            )

    def state_dict(self) -> Dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "bad_validations": self.bad_validations,
                "last_step": self.last_step}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.best = state_values.number(state, "best", None, optional=True)
        self.best_step = state_values.whole(state, "best_step", 0, minimum=0)
        self.bad_validations = state_values.whole(state, "bad_validations", 0, minimum=0)
        self.last_step = state_values.whole(state, "last_step", -1, minimum=-1)
