"""CheckInvalidLossHook: stop or skip a step whose loss is NaN or infinite, before it updates anything."""

from __future__ import annotations

import math
from typing import Any, Dict, List

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from ..steps import Count
from . import state as state_values
from .base import Hook, Priority

POLICIES = ("raise", "skip")


class InvalidLossError(RuntimeError):
    """A loss term was NaN or infinite (the message names the term, the step and the views)."""


@HOOKS.register()
class CheckInvalidLossHook(Hook):
    """Checks every loss term for NaN / Inf every ``interval`` steps, after backward and before
    densification and the optimizer step, so the parameters are still those of the last good step.

    - ``raise``: stop with an error naming the term, the step and the views that produce it;
      the trainer saves ``ckpt/rescue_step_XXXXXX.pt``, the state before the step (resuming
      from it runs that step again, on the same views).
    - ``skip``: drop the step's update (no densification statistics, no optimizer step), count
      it, and warn; after more than ``max_skips`` skipped steps, stop as ``raise`` does.

    Args:
        interval: check every N steps.
        policy: raise | skip.
        max_skips: with ``skip``, how many steps may be skipped in the whole run.
    """

    rank_consistent = True  # the losses it checks are the averages over the ranks

    priority = Priority.VERY_HIGH

    def __init__(self, interval: Count = 1, policy: str = "raise", max_skips: int = 10) -> None:
        super().__init__()
        if policy not in POLICIES:
            raise ConfigError(f"CheckInvalidLossHook policy {policy!r}: use one of {', '.join(POLICIES)}")
        if interval < 1 or max_skips < 0:
            raise ConfigError("CheckInvalidLossHook needs interval >= 1 and max_skips >= 0")
        self.interval = interval
        self.policy = policy
        self.max_skips = max_skips
        self.skips = 0

    def after_backward(self, trainer, step: int, outputs: Dict[str, Any]) -> None:
        if not self.every_n_steps(trainer, self.interval):
            return
        losses = outputs["losses"]
        if bool(torch.isfinite(torch.stack([v.detach().float() for v in losses.values()])).all()):
            return  # one device-to-host read per check: the skip decision precedes the update (use interval to thin it)
        values = {name: float(value.detach()) for name, value in losses.items()}
        terms = ", ".join(f"{name} = {value}" for name, value in values.items() if not math.isfinite(value))
        views = ", ".join(_invalid_views(trainer, outputs)) or "none alone (a regulariser)"
        problem = f"invalid loss at step {step}: {terms} (views: {views})"
        if self.policy == "skip" and self.skips < self.max_skips:
            self.skips += 1
            outputs["skip_update"] = True
            trainer.console.warning(f"{problem}; skipped the update ({self.skips} of at most {self.max_skips})")
            trainer.runtime_info["invalid_loss/skips"] = float(self.skips)
            return
        limit = f"; {self.skips} steps skipped already, the limit is {self.max_skips}" if self.policy == "skip" else ""
        raise InvalidLossError(f"{problem}{limit}")  # the trainer saves the last completed step and says where

    def state_dict(self) -> Dict[str, Any]:
        return {"skips": self.skips} if self.skips else {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.skips = state_values.whole(state, "skips", 0, minimum=0)


def _invalid_views(trainer, outputs: Dict[str, Any]) -> List[str]:
    """Names of the step's views whose own micro-batch's loss terms are not all finite: the step's
    renders and losses as they were (``outputs.view_losses``), nothing rendered again."""
    names: List[str] = []
    for views, losses in outputs["view_losses"]:
        if not all(math.isfinite(float(v.detach())) for v in losses.values()):
            names += views
    return names
