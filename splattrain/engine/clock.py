"""The engine's step readings: one clock for the steps' times, one average of the loss.

Hooks, the log and the viewer read these (``trainer.clock``, ``trainer.loss_average``) instead of
timing steps or averaging the loss themselves.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch
from torch import Tensor

from ..errors import ConfigError
from ..protocol import StepClock

#: Weight of the old value in the running mean of step time.
MEAN_MOMENTUM = 0.9


class Stopwatch:
    """Times the training steps: it runs only inside a step (between :meth:`start_step` and
    :meth:`end_step`, pauses left out); :meth:`lap` just before a step's ``after_train_iter``
    closes that step's reading, which covers what ran since the last lap."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._now = clock
        self.total_seconds = 0.0  #: running time of every step so far (a resumed run's included)
        self.reading = StepClock()
        self._running_since: Optional[float] = None
        self._since_lap = 0.0  # running time since the last lap, the running stretch not included
        self._step_started: Optional[float] = None
        self._data_seconds = 0.0

    def restore(self, total_seconds: float) -> None:
        """Continue a resumed run's total."""
        self.total_seconds = float(total_seconds)

    def start_step(self) -> None:
        """The step begins: the clock runs."""
        self._step_started = self._running_since = self._now()
        self._data_seconds = 0.0

    def data_ready(self) -> None:
        """The step's batch is in hand."""
        if self._step_started is not None:
            self._data_seconds = self._now() - self._step_started

    def pause(self) -> None:
        """Stop the clock (a pause); nothing when it is not running."""
        self._stop()

    def resume(self) -> None:
        """Restart the clock after :meth:`pause`, when inside a step."""
        if self._step_started is not None and self._running_since is None:
            self._running_since = self._now()

    def lap(self, step: int, max_steps: int) -> StepClock:
        """Close the reading of ``step``: the running time since the last lap."""
        self._stop()
        seconds, self._since_lap = self._since_lap, 0.0
        if self._step_started is not None:
            self._running_since = self._now()
        old = self.reading
        mean = seconds if old.timed_steps == 0 else MEAN_MOMENTUM * old.mean_step_seconds + (1 - MEAN_MOMENTUM) * seconds
        self.reading = StepClock(step=step, step_seconds=seconds, data_seconds=self._data_seconds,
                                 mean_step_seconds=mean, eta_seconds=mean * max(0, max_steps - step),
                                 timed_steps=old.timed_steps + 1, timed_seconds=old.timed_seconds + seconds)
        return self.reading

    def end_step(self) -> None:
        """The step is over (its ``after_train_iter`` hooks too): the clock stops."""
        self._stop()
        self._step_started = None

    def _stop(self) -> None:
        if self._running_since is not None:
            stretch = self._now() - self._running_since
            self._running_since = None
            self._since_lap += stretch
            self.total_seconds += stretch


class LossAverage:
    """The EMA of the steps' weighted loss: ``weight * old + (1 - weight) * new``, starting at the
    first step's loss. It stays on the loss's device (no host read per step); :attr:`value` reads
    it back when asked (the log, the viewer's stats, a checkpoint)."""

    def __init__(self, weight: float) -> None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight < 1.0:
            raise ConfigError(f"trainer.loss_ema {weight!r}: use the weight of the old value in [0, 1)")
        self.weight = float(weight)
        self._tensor: Optional[Tensor] = None
        self._restored: Optional[float] = None  # from a checkpoint, until the first step

    @torch.no_grad()
    def update(self, loss: Tensor) -> None:
        """Fold in a step's weighted loss."""
        new = loss.detach().float()
        if self._tensor is None:
            if self._restored is None:
                self._tensor = new.clone()
                return
            self._tensor = torch.full((), self._restored, dtype=torch.float32, device=new.device)
            self._restored = None
        self._tensor.mul_(self.weight).add_(new, alpha=1.0 - self.weight)

    @property
    def tensor(self) -> Optional[Tensor]:
        """A copy of the average on the loss's device (None before the first step)."""
        if self._tensor is None:
            return None if self._restored is None else torch.tensor(self._restored, dtype=torch.float32)
        return self._tensor.clone()

    @property
    def value(self) -> Optional[float]:
        """The average read back to the host (None before the first step)."""
        return float(self._tensor) if self._tensor is not None else self._restored

    def restore(self, value: Optional[float]) -> None:
        """Continue from a checkpoint's average (None: start again at the next step's loss)."""
        self._tensor = None
        self._restored = None if value is None else float(value)
