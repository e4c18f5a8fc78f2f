"""AutoCheckpointHook: a resumable checkpoint on SIGINT / SIGTERM / SIGUSR1 and on crashes."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Dict, Optional

from ..checkpoint import save_checkpoint_file
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
    on. Any other failure saves ``rescue_step_XXXXXX.pt`` (the last completed step) before
    the error propagates, when a step was completed since the run started. Previous signal handlers are restored when the run ends.

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
        self.completed_step = 0
        self._start_step = 0
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

    def after_run(self, trainer) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    # -- safe points -------------------------------------------------------------------
    def before_train(self, trainer) -> None:
        self.completed_step = self._start_step = trainer.step

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        self.completed_step = step
        if self.pending is not None:
            self._save_at_safe_point(trainer)

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

    def on_exception(self, trainer, error: BaseException) -> None:
        if not self.rescue or isinstance(error, RunInterrupted) or self.completed_step <= self._start_step:
            return  # nothing trained since the run (or its resume) started: nothing to rescue
        if not getattr(trainer, "is_main", True):
            return  # rank 0 writes the rescue checkpoint
        checkpoint = trainer.checkpoint_state()
        checkpoint["step"] = self.completed_step
        path = trainer.checkpoint_dir / f"rescue_step_{self.completed_step:06d}.pt"
        save_checkpoint_file(checkpoint, path)
        trainer.console.warning(
            f"the run failed ({type(error).__name__}); saved a rescue checkpoint of step {self.completed_step} "
            f"to {path}. Resume with: {trainer.resume_hint} {path}"
        )
