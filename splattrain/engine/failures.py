"""The trainer's signals and failures: a stop or snapshot signal acted on at a safe point, and a
failed run's rescue checkpoint. Part of :class:`~splattrain.engine.DefaultTrainer`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .. import interrupts
from ..checkpoints import rescue
from . import signals


class FailureHandling:
    """What the trainer does on a signal or a failure, over its attributes (assigned by the trainer)."""

    _failed: bool

    def _act_on_signals(self, stop: Optional[int], snapshot: bool, finished: bool = False) -> None:
        """At a safe point: let hooks ask for a checkpoint (``on_signal``) and save it; then stop on
        ``stop``, or go on after a snapshot."""
        signum = stop or (interrupts.SNAPSHOT_SIGNAL if snapshot else None)
        if signum is None:
            return
        pending = self.requests.saves.pop(None, None)  # asked during the step: saved after it, unless saved here
        self.call_hook("on_signal", signum)
        wanted = self.requests.take_checkpoint()
        if pending is not None and not wanted:
            self.requests.ask_checkpoint(None, pending)
        last = self.checkpoint_dir / "last.pt"
        if finished:  # the last step's checkpoint is the one to resume from
            path = last if wanted and last.exists() else None
        else:
            path = self.save_checkpoint() if wanted else None
        level, message = signals.describe(signum, bool(stop), self.step, path, finished, self.resume_hint)
        (self.console.warning if level == "warning" else self.console.info)(message)
        if stop:
            raise interrupts.RunInterrupted(stop, path)

    def _report_exception(self, error: BaseException) -> None:
        failed_step = self.step
        self._failed = True
        self.shadow.swap_out(self.model.params)
        try:
            self.call_hook("on_exception", error)
        except Exception as hook_error:  # keep the original error as the one raised
            self.console.warning(f"while handling {type(error).__name__}: {hook_error}")
        if self.cfg.trainer.rescue_checkpoint and not isinstance(error, interrupts.RunInterrupted):
            try:
                self._save_rescue(error, failed_step)
            except Exception as save_error:
                self.console.warning(f"could not save a rescue checkpoint ({type(save_error).__name__}: {save_error})")

    def _save_rescue(self, error: BaseException, running: int) -> Optional[Path]:
        """``ckpt/rescue_step_XXXXXX.pt`` of the last completed step (rank 0), when a step was
        completed since the run (or its resume) started and the model holds Gaussians."""
        state = self.state
        completed = state.completed_step
        if completed <= state.start_step or not self.is_main or self.model.num_gaussians == 0:
            return None
        checkpoint = self.checkpoint_state(step=completed)
        return rescue.save(checkpoint, state.before_step if completed < running else None,
                           self.run_folder.rescue_path(completed), error, self.console.warning, self.resume_hint)
