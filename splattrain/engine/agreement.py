"""What the ranks agree on: after each step's backward, skipping the update; after each step, the
requests hooks made (stop, validate, save). Signals are agreed on in :mod:`.signals`."""

from __future__ import annotations

from typing import List, Optional

from ..hooks.base import Hook
from ..hooks.trainer_api import StepOutputs, Trainer


def agree_on_step(trainer: Trainer, outputs: StepOutputs) -> None:
    """Make ``outputs.skip_update`` the same on every rank.

    The update is skipped when any rank's hooks skip it: that takes one small all-reduce (max),
    only when a hook that may decide from rank-local information implements ``after_backward``
    (hooks deciding only from what every rank shares, the averaged losses and gradients, declare
    ``rank_consistent = True``). (Signals travel in the gradient exchange: :mod:`.signals`.)
    """
    ctx = trainer.dist
    if ctx.enabled and rank_local_deciders(trainer):
        outputs.skip_update = bool(ctx.any_rank([int(bool(outputs.skip_update))])[0])


def agree_on_requests(trainer: Trainer, stop: Optional[str], validation: bool,
                      checkpoint: bool) -> tuple[Optional[str], bool, bool]:
    """The hooks' requests of this step (the stop reason, validate, save) as any rank made them,
    so every rank acts alike: one small all-reduce per step on several ranks (and, on the step a
    stop is agreed, an exchange of the reasons), none in a single process."""
    ctx = trainer.dist
    if not ctx.enabled:
        return stop, validation, checkpoint
    agreed = ctx.any_rank([int(stop is not None), int(validation), int(checkpoint)])
    if agreed[0]:
        reasons = ctx.gather_objects(stop)
        stop = next(f"{reason} (rank {rank})" if rank else reason for rank, reason in enumerate(reasons) if reason)
    return stop, bool(agreed[1]), bool(agreed[2])


def rank_local_deciders(trainer: Trainer) -> List[str]:
    """Names of the hooks whose ``after_backward`` may decide differently on each rank."""
    return [type(hook).__name__ for hook in trainer.hooks.hooks
            if type(hook).after_backward is not Hook.after_backward and not getattr(hook, "rank_consistent", False)]
