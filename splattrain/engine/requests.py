"""What the ranks agree on: after each step's backward, skipping the update; after each step, the
requests hooks made (stop, validate, save). Signals are agreed on in :mod:`.signals`."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..distributed import DistContext
from ..hooks.base import Hook
from ..hooks.trainer_api import StepOutputs


class StepRequests:
    """What hooks asked during the running step (stop with a reason, validate, save), held until
    the trainer acts on them after the step, as every rank agrees."""

    def __init__(self) -> None:
        self.stop: Optional[str] = None
        self.validate = False
        self.checkpoint = False

    def ask_stop(self, reason: str) -> None:
        """Stop after the step (the first reason given is kept)."""
        if self.stop is None:
            self.stop = str(reason)

    def take_checkpoint(self) -> bool:
        """Whether a checkpoint was asked, forgetting the ask."""
        asked, self.checkpoint = self.checkpoint, False
        return asked

    def agreed(self, dist: DistContext) -> Tuple[Optional[str], bool, bool]:
        """(stop reason, validate, save) as any rank asked, and the asks forgotten: one small
        all-reduce per step on several ranks (and, on the step a stop is agreed, an exchange of
        the reasons), none in a single process."""
        stop, validate, save = self.stop, self.validate, self.checkpoint
        self.stop, self.validate, self.checkpoint = None, False, False
        if not dist.enabled:
            return stop, validate, save
        agreed = dist.any_rank([int(stop is not None), int(validate), int(save)])
        if agreed[0]:
            reasons = dist.gather_objects(stop)
            stop = next(f"{reason} (rank {rank})" if rank else reason for rank, reason in enumerate(reasons) if reason)
        return stop, bool(agreed[1]), bool(agreed[2])


def agree_on_step(dist: DistContext, hooks: Sequence[Hook], outputs: StepOutputs) -> None:
    """Make ``outputs.skip_update`` the same on every rank.

    The update is skipped when any rank's hooks skip it: that takes one small all-reduce (max),
    only when a hook that may decide from rank-local information implements ``after_backward``
    (hooks deciding only from what every rank shares, the averaged losses and gradients, declare
    ``rank_consistent = True``). (Signals travel in the gradient exchange: :mod:`.signals`.)
    """
    if dist.enabled and rank_local_deciders(hooks):
        outputs.skip_update = bool(dist.any_rank([int(bool(outputs.skip_update))])[0])


def rank_local_deciders(hooks: Sequence[Hook]) -> List[str]:
    """Names of the hooks whose ``after_backward`` may decide differently on each rank."""
    return [type(hook).__name__ for hook in hooks
            if type(hook).after_backward is not Hook.after_backward and not getattr(hook, "rank_consistent", False)]
