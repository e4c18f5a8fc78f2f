"""What the ranks agree on: after each step's backward, skipping the update; after each step, the
requests hooks made (stop, validate, save). Signals are agreed on in :mod:`.signals`."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..distributed import DistContext
from ..hooks.base import Hook
from ..protocol import StepOutputs


#: The checkpoints asked during a step: name (None: ``step_XXXXXX.pt``) -> how many step
#: checkpoints to keep (0: all).
Saves = Dict[Optional[str], int]


class StepRequests:
    """What hooks asked during the running step (stop with a reason, validate, save checkpoints,
    pause), held until the trainer acts on them after the step and its validation, as every rank
    agrees (a pause is the asking rank's own)."""

    def __init__(self) -> None:
        self.stop: Optional[str] = None
        self.validate = False
        self.saves: Saves = {}
        self.pause: Optional[Callable[[], bool]] = None

    def ask_stop(self, reason: str) -> None:
        """Stop after the step (the first reason given is kept)."""
        if self.stop is None:
            self.stop = str(reason)

    def ask_checkpoint(self, name: Optional[str] = None, keep_last: int = 0) -> None:
        """Save a checkpoint (``name``, or the step's) after the step; asked twice, the larger
        ``keep_last`` of the asks that keep some wins, 0 (keep all) over any."""
        earlier = self.saves.get(name)
        self.saves[name] = keep_last if earlier is None else (0 if 0 in (earlier, keep_last) else max(earlier, keep_last))

    @property
    def checkpoint(self) -> bool:
        """Whether a checkpoint of the step is asked."""
        return None in self.saves

    def take_checkpoint(self) -> bool:
        """Whether a checkpoint of the step was asked, forgetting that ask."""
        return self.saves.pop(None, None) is not None

    def take_saves(self) -> Saves:
        """The checkpoints asked so far, forgetting them."""
        saves, self.saves = self.saves, {}
        return saves

    def take_pause(self) -> Optional[Callable[[], bool]]:
        """The pause asked (its wait call), forgetting it."""
        wait, self.pause = self.pause, None
        return wait

    def agreed(self, dist: DistContext) -> Tuple[Optional[str], bool, Saves]:
        """(stop reason, validate, checkpoints to save) as any rank asked, and the asks forgotten:
        one small all-reduce per step on several ranks (and, on a step where a stop or a save is
        agreed, an exchange of the reasons or names), none in a single process."""
        stop, validate, saves = self.stop, self.validate, self.take_saves()
        self.stop, self.validate = None, False
        if not dist.enabled:
            return stop, validate, saves
        agreed = dist.any_rank([int(stop is not None), int(validate), int(bool(saves))])
        if agreed[0]:
            reasons = dist.gather_objects(stop)
            stop = next(f"{reason} (rank {rank})" if rank else reason for rank, reason in enumerate(reasons) if reason)
        if agreed[2]:
            merged = StepRequests()
            for asked in dist.gather_objects(saves):
                for name, keep_last in asked.items():
                    merged.ask_checkpoint(name, keep_last)
            saves = merged.saves
        return stop, bool(agreed[1]), saves


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
