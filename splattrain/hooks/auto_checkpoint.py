"""AutoCheckpointHook: which signals make the run save a resumable checkpoint."""

from __future__ import annotations

import signal

from ..interrupts import RunInterrupted
from ..registry import HOOKS
from .base import Hook, Priority

__all__ = ["AutoCheckpointHook", "RunInterrupted"]


@HOOKS.register()
class AutoCheckpointHook(Hook):
    """Asks for a checkpoint when the run gets one of ``signals``; the trainer owns the signals.

    :mod:`splattrain.interrupts` records SIGINT, SIGTERM and SIGUSR1; the trainer acts on them at
    its next safe point (after a step, between two validation views, after the last step),
    never in the middle of an update, with every rank at the same step, and calls ``on_signal``.
    This hook then asks for a checkpoint, which the trainer saves there: on SIGINT / SIGTERM a
    resumable ``ckpt/step_N.pt`` (and ``last.pt``) and the run stops; on SIGUSR1 a snapshot, and
    training goes on. After the last step nothing new is saved: the run stops before writing its
    results, resumable from ``last.pt``. A run stops on SIGINT / SIGTERM with or without this hook;
    without it (or for a signal not in ``signals``) nothing is saved. A run that fails otherwise
    saves a rescue checkpoint of its last completed step (``trainer.rescue_checkpoint``).

    Args:
        signals: the signals to save a checkpoint on (default SIGINT, SIGTERM, SIGUSR1).
    """

    priority = Priority.LOWEST

    def __init__(self, signals: tuple[str, ...] = ("SIGINT", "SIGTERM", "SIGUSR1")) -> None:
        super().__init__()
        self.signals = [getattr(signal, name) for name in signals if hasattr(signal, name)]

    def on_signal(self, trainer, signum: int) -> None:
        if signum in self.signals:
            trainer.request_checkpoint()
