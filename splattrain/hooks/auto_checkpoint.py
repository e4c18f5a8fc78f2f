"""AutoCheckpointHook: what is saved when the run gets SIGINT / SIGTERM / SIGUSR1, and on crashes."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Optional

from ..interrupts import RunInterrupted
from ..registry import HOOKS
from .base import Hook, Priority

__all__ = ["AutoCheckpointHook", "RunInterrupted"]


@HOOKS.register()
class AutoCheckpointHook(Hook):
    """Decides what the run saves when it gets a signal; the trainer owns the signals.

    :mod:`splattrain.interrupts` records SIGINT, SIGTERM and SIGUSR1; the trainer acts on them at
    its next safe point (after a step, between two validation views, after the last step),
    never in the middle of an update, with every rank at the same step, and then calls
    :meth:`save_on_signal`. On SIGINT / SIGTERM this saves a resumable ``ckpt/step_N.pt`` (and
    ``last.pt``) and the run stops; on SIGUSR1 a snapshot, and training goes on. After the last
    step nothing new is saved: the run stops before writing its results, resumable from
    ``last.pt``. A run stops on SIGINT / SIGTERM with or without this hook; without it (or for a
    signal not in ``signals``) nothing is saved. Any other failure makes the trainer save
    ``rescue_step_XXXXXX.pt`` (the last completed step) unless ``rescue`` is false.

    Args:
        signals: the signals to save a checkpoint on (default SIGINT, SIGTERM, SIGUSR1).
        rescue: save a rescue checkpoint when the run fails with an exception (read by the trainer).
    """

    priority = Priority.LOWEST

    def __init__(self, signals: tuple[str, ...] = ("SIGINT", "SIGTERM", "SIGUSR1"), rescue: bool = True) -> None:
        super().__init__()
        self.signals = [getattr(signal, name) for name in signals if hasattr(signal, name)]
        self.rescue = rescue

    def save_on_signal(self, trainer, signum: int, finished: bool = False) -> Optional[Path]:
        """Called by the trainer at a safe point after ``signum`` (on every rank alike): the
        checkpoint to resume from, saved now unless ``finished`` (after the last step, whose
        checkpoint is ``last.pt``); None when this hook does not handle ``signum``."""
        if signum not in self.signals:
            return None
        if finished:
            return trainer.checkpoint_dir / "last.pt"
        return trainer.save_checkpoint(trainer.checkpoint_dir / f"step_{trainer.step:06d}.pt")
