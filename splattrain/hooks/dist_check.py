"""DistributedCheckHook: stop when the ranks' replicas of the model stop being identical."""

from __future__ import annotations

from typing import Any, Dict, List

from ..distributed.sync import parameter_checksums
from ..errors import UserError
from ..registry import HOOKS
from .base import Hook, Priority


class ReplicaDivergenceError(UserError):
    """The ranks' Gaussians differ: something in the step is not the same on every rank."""


@HOOKS.register()
class DistributedCheckHook(Hook):
    """Compares a checksum of every parameter (and the Gaussian count) across ranks.

    A run on several ranks gets one (``interval`` 1000) unless ``custom_hooks`` lists one.
    Runs before training, every ``interval`` steps and before every checkpoint, and stops with
    an error naming the first parameter that differs from rank 0's, and the ranks that differ.
    A single process has nothing to compare: the hook does nothing. The checksum sums each
    tensor's bit patterns, so any difference in any value is caught (the cost is one pass over
    the parameters and one small all-gather).

    Args:
        interval: check every N steps (0: only before training and before checkpoints).
    """

    priority = Priority.BELOW_NORMAL

    def __init__(self, interval: int = 1000, priority=None) -> None:
        super().__init__(priority)
        self.interval = interval
        self.checks = 0
        self._failed = False

    @classmethod
    def ensure(cls, trainer) -> None:
        """Register a default instance on a run with several ranks that has none."""
        if trainer.dist.enabled and not any(isinstance(h, cls) for h in trainer.hooks.hooks):
            hook = cls()
            hook.state_key = "dist_check"
            trainer.register_hook(hook)

    def before_train(self, trainer) -> None:
        self.check(trainer, "before training")

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.interval > 0 and step % self.interval == 0:
            self.check(trainer, f"after step {step}")

    def before_save_checkpoint(self, trainer, checkpoint: Dict[str, Any]) -> None:
        if not self._failed:  # a rescue checkpoint is written by rank 0 alone: no collective then
            self.check(trainer, f"before the checkpoint of step {trainer.step}")
            # the ranks accumulate strategy statistics locally between refinements: the checkpoint
            # holds their totals (rank 0's copy), whatever world size resumes it
            trainer.strategy.sync_statistics(trainer.strategy_state)
            trainer.strategy.release_statistics(trainer.strategy_state)

    def on_exception(self, trainer, error: BaseException) -> None:
        self._failed = True

    def check(self, trainer, when: str) -> None:
        """Raise :class:`ReplicaDivergenceError` when any rank's parameters differ from rank 0's."""
        if not trainer.dist.enabled:
            return
        tensors = dict(trainer.model.params)
        view_opt = getattr(trainer, "view_opt", None)
        for section, module in (view_opt.modules.items() if view_opt is not None else ()):  # per-view corrections too
            tensors.update((f"{section}.{n}", p) for n, p in module.named_parameters())
        names = list(tensors)
        tables = trainer.dist.gather_checksums(parameter_checksums(tensors[n] for n in names))
        self.checks += 1
        reference = tables[0]
        for row, name in enumerate(names):
            differing: List[int] = [rank for rank, table in enumerate(tables) if not bool((table[row] == reference[row]).all())]
            if differing:
                counts = ", ".join(f"rank {r}: {int(tables[r][row][0]):,}" for r in [0, *differing])
                raise ReplicaDivergenceError(
                    f"the replicas diverged {when}: parameter '{name}' differs from rank 0's on rank(s) "
                    f"{', '.join(map(str, differing))} (elements {counts}); a hook or plugin made a different "
                    "choice on some rank"
                )
