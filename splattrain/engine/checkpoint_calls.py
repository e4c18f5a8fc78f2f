"""The trainer's checkpoints: its run state and components captured (hooks' additions included)
and written, a checkpoint read, checked and restored, and the replicas compared before a
checkpoint. Part of :class:`~splattrain.engine.DefaultTrainer`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from . import checkpointing
from .replicas import check_replicas
from .run_state import RunState


class CheckpointCalls:
    """Checkpoints over ``state`` and the components the trainer sets."""

    state: RunState
    _failed: bool

    def checkpoint_state(self, step: Optional[int] = None) -> Dict[str, Any]:
        """Everything needed to continue this run after ``step`` (default: the current step);
        hooks add to it in before_save_checkpoint."""
        step = self.state.step if step is None else step
        self._check_replicas(f"before the checkpoint of step {step}", checkpoint=True)
        checkpoint = checkpointing.capture(
            self.state, step, cfg=self.cfg, model=self.model, shadow=self.shadow, data=self.data,
            data_type=self.data_type, renderer=self.renderer, view_opt=self.view_opt, hooks=self.hooks.hooks)
        if self.run_folder.run_id:
            checkpoint["run_id"] = self.run_folder.run_id  # resuming refuses another run's checkpoint
        self.call_hook("before_save_checkpoint", checkpoint)
        return checkpoint

    def save_checkpoint(self, name: Optional[str] = None, keep_last: int = 0) -> Path:
        """Write a resumable checkpoint of the current step: ``step_XXXXXX.pt`` (and ``last.pt``;
        ``keep_last`` > 0 keeps that many step checkpoints), or ``<name>.pt``. Every rank calls it
        (the replicas are compared first); only rank 0 writes."""
        checkpoint = self.checkpoint_state()
        if not self.is_main:
            return self.run_folder.checkpoint_path(self.state.step, name)
        return self.run_folder.write_checkpoint(checkpoint, name, keep_last)

    def read_checkpoint(self, source: str | Path) -> Tuple[Path, Dict[str, Any]]:
        """Find, load and check ``source`` (a path, or ``"latest"``) against this run; changes nothing."""
        return checkpointing.read_checkpoint(
            source, self.checkpoint_dir, self.console.warning, state=self.state, cfg=self.cfg,
            strategy=self.strategy, scene_scale=self.scene_scale, data=self.data)

    def load_checkpoint(self, source: str | Path) -> Dict[str, Any]:
        """Restore a checkpoint (a path or ``"latest"``) and continue from its step."""
        path, checkpoint = self.read_checkpoint(source)
        self._restore(path, checkpoint)
        self.call_hook("after_load_checkpoint", checkpoint)
        return checkpoint

    def _restore(self, path: Path, checkpoint: Dict[str, Any]) -> None:
        """Load a checkpoint's state into the run state, model, optimizers, strategy, data order,
        RNGs and hooks."""
        checkpointing.restore(
            self.state, path, checkpoint, self.console.info, self.console.warning, cfg=self.cfg, model=self.model,
            shadow=self.shadow, renderer=self.renderer, data=self.data, view_opt=self.view_opt,
            hooks=self.hooks.hooks, scene_scale=self.scene_scale, max_steps=self.max_steps, device=self.device)
        self.strategy.restored_statistics(self.state.strategy_state)

    def _check_replicas(self, when: str, checkpoint: bool = False) -> None:
        """Compare the ranks' replicas (several ranks only); before a ``checkpoint`` the strategy's
        statistics are combined too, so it holds their totals whatever world size resumes it."""
        if not self.dist.enabled or self._failed:
            return
        check_replicas(self.dist, self.model.params, self.view_opt, when)
        if checkpoint:
            self.strategy.sync_statistics(self.state.strategy_state)
            self.strategy.release_statistics(self.state.strategy_state)
