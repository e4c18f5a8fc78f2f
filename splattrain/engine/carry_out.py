"""The trainer carrying out what hooks asked during a step, after the step and its validation:
a stop, a validation, the checkpoints, a pause. Part of :class:`~splattrain.engine.DefaultTrainer`."""

from __future__ import annotations

from typing import Dict, Optional

from .. import interrupts


class CarryingOut:
    """The requests of a step acted on, over the trainer's attributes (assigned by the trainer) and
    its run state."""

    def _finish_restored_step(self) -> None:
        """A checkpoint holds its step after that step's validation; one saved before it (a stop
        signal in the step) gets the validation now, so the run goes on as the straight one."""
        if self.step >= self.max_steps:
            self.console.warning(f"the checkpoint is at step {self.step}; trainer.max_steps is {self.max_steps}, nothing to train")
        due = self.step > 0 and self.schedule.validates_at(self.step)
        if (due and self.last_metrics.get("step") != self.step) or self.cfg.trainer.val_on_resume:
            self.validate()
            self._save_requested(self.requests.agreed(self.dist)[2])

    def _after_requests(self, step: int, validated: bool) -> bool:
        """Act on the step's requests as the ranks agree on them (after the step's validation, so
        a checkpoint holds what it changed); True when the run stops here."""
        reason, validate, saves = self.requests.agreed(self.dist)
        interval = self.replica_check_interval
        if interval > 0 and step % interval == 0:
            self._check_replicas(f"after step {step}")
        if (validate or reason is not None) and not validated:
            self.validate()  # its hooks may ask more (a best checkpoint, a stop)
            later, _, more = self.requests.agreed(self.dist)
            reason, saves = reason or later, {**saves, **more}
        if reason is not None:
            self.state.stopped = {"step": step, "reason": reason}
            self.console.info(f"stopping after step {step}: {reason}")
            saves.setdefault(None, 0)
        self._save_requested(saves)
        if reason is None:
            self._carry_out_pause()
        return reason is not None

    def _save_requested(self, saves: Dict[Optional[str], int]) -> None:
        """Write the checkpoints asked for: the step's first, then the named ones."""
        for name in sorted(saves, key=lambda n: (n is not None, n or "")):
            self.save_checkpoint(name, saves[name])

    def _carry_out_pause(self) -> None:
        """Hold the run while the pause asked for lasts (see :meth:`request_pause`)."""
        wait = self.requests.take_pause()
        if wait is None:
            return
        with self.paused():
            while interrupts.pending() is None:
                going_on = wait()
                self._save_requested(self.requests.take_saves())
                if not going_on:
                    break
