"""AutoCheckpointHook: a resumable checkpoint on SIGINT / SIGTERM / SIGUSR1 and on crashes."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Dict, Optional

from .. import interrupts
from ..registry import HOOKS
from .base import Hook, Priority


class RunInterrupted(KeyboardInterrupt):
    """The run stopped on a signal after saving ``checkpoint``; ``signum`` sets the exit code."""

    def __init__(self, signum: int, checkpoint: Path) -> None:
        super().__init__(f"{signal.Signals(signum).name}: checkpoint saved to {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint


_SNAPSHOT_SIGNALS = ("SIGUSR1",)


@HOOKS.register()
class AutoCheckpointHook(Hook):
    """Saves a resumable checkpoint at the next safe point after SIGINT / SIGTERM, then stops.

    The signal handler only records the signal; the checkpoint is written between steps
    (or between validation views), never in the middle of an update, and signals that
    arrive while it is written are ignored. SIGUSR1 saves a snapshot and training goes
    on. A signal that arrives after the last step (final validation, ``after_train``) stops
    the run too, so the final results are not written as if it had finished. Any other failure
    makes the trainer save ``rescue_step_XXXXXX.pt`` (the last completed step) unless ``rescue``
    is false. Previous signal handlers are restored when the run ends.

    Args:
        signals: signal names to handle (default SIGINT, SIGTERM, SIGUSR1).
        rescue: save a rescue checkpoint when the run fails with an exception.
    """

    priority = Priority.LOWEST

    def __init__(self, signals: tuple[str, ...] = ("SIGINT", "SIGTERM", "SIGUSR1"), rescue: bool = True) -> None:
        super().__init__()
        self.signals = [getattr(signal, name) for name in signals if hasattr(signal, name)]
        self.rescue = rescue
        self.pending: Optional[int] = None
        self._saving = False
        self._previous: Dict[int, Any] = {}

    # -- signal handling -------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        if not self._saving:
            self.pending = signum

    def before_run(self, trainer) -> None:
        if threading.current_thread() is not threading.main_thread():
            trainer.console.warning("AutoCheckpointHook: not in the main thread, signals are not handled")
            return
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        self.pending = interrupts.take() or self.pending  # one the command line recorded while the run started

    def after_run(self, trainer) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    # -- safe points -------------------------------------------------------------------
    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.pending is not None:
            self._save_at_safe_point(trainer)

    def after_train(self, trainer) -> None:
        signum, self.pending = self.pending, None
        if signum is None or signal.Signals(signum).name in _SNAPSHOT_SIGNALS:
            return
        last = trainer.checkpoint_dir / "last.pt"
        trainer.console.warning(
            f"{signal.Signals(signum).name} received after the last step: the run stops before writing its "
            f"results. Resume with: {trainer.resume_hint}"
        )
        raise RunInterrupted(signum, last)

    def after_val_iter(self, trainer, index: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.pending is not None:
            self._save_at_safe_point(trainer)

    def _save_at_safe_point(self, trainer) -> None:
        signum, self.pending = self.pending, None
        self._saving = True
        try:
            path = trainer.save_checkpoint(trainer.checkpoint_dir / f"step_{trainer.step:06d}.pt")
        finally:
            self._saving = False
        name = signal.Signals(signum).name
        if name in _SNAPSHOT_SIGNALS:
            trainer.console.info(f"{name}: saved a snapshot at step {trainer.step} to {path}; training goes on")
            return
        trainer.console.warning(
            f"{name} received: saved a resumable checkpoint at step {trainer.step} to {path}. "
            f"Resume with: {trainer.resume_hint}"
        )
        raise RunInterrupted(signum, path)
