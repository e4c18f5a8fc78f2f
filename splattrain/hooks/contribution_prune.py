"""ContributionPruneHook: remove the Gaussians that paint least of the training images."""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from ..render.contribution import blending_weights
from ..steps import Count, scale_count
from .base import Hook, Priority


def check_steps(steps: Any, what: str) -> None:
    """Refuse ``steps`` unless null or a list of whole steps >= 1 (ConfigError: ``what`` names the option)."""
    if steps is not None and (isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in steps)):
        raise ConfigError(f"{what} must be a list of steps >= 1 or null, got {steps!r}")


@HOOKS.register()
class ContributionPruneHook(Hook):
    """Removes the Gaussians that paint least of the training images, when densification ends.

    After each step of ``steps``, the ``fraction`` of the Gaussians whose compositing weights,
    summed over the training views' pixels, are lowest go (a pruning schedule in the spirit of
    Speedy-Splat; the score of LightGaussian and Mini-Splatting).

    Pruned once when densification ends, the rest of the run settles the survivors: on the cup at
    7000 steps a ``fraction`` of 0.5 kept 30.31 dB against 30.35 with half the Gaussians
    (docs/optimisation.md). Scoring renders each scored view once, forward and backward.

    Args:
        steps: the steps after which to prune; they follow the run's length like every step
            setting. None: once, when densification ends (``trainer.schedule.densification_ends``: the
            strategy's ``refine_stop_iter``).
        fraction: the share of the Gaussians removed each time, in (0, 1).
        max_views: score on at most this many training views, evenly spaced (0: all of them).
    """

    priority = Priority.NORMAL  # before the checkpoint hook: a checkpoint of the step holds the pruned scene

    def __init__(self, steps: Optional[Sequence[int]] = None, fraction: float = 0.5, max_views: Count = 0,
                 priority: Any = None) -> None:
        super().__init__(priority)
        check_steps(steps, "ContributionPruneHook steps")
        if not (isinstance(fraction, (int, float)) and 0.0 < fraction < 1.0):
            raise ConfigError(f"ContributionPruneHook fraction must be in (0, 1), got {fraction!r}")
        if isinstance(max_views, bool) or not isinstance(max_views, int) or max_views < 0:
            raise ConfigError(f"ContributionPruneHook max_views must be a count >= 0, got {max_views!r}")
        self.steps = sorted(set(steps)) if steps is not None else None
        self.fraction, self.max_views = float(fraction), max_views
        self.pruned: List[Tuple[int, int, int]] = []  # (step, removed, left)

    @classmethod
    def scale_steps(cls, options: Dict[str, Any], run: float, window: float, where: str) -> List[Tuple[str, Any, Any]]:
        """The listed steps follow the run's length."""
        written = options.get("steps")
        check_steps(written, f"key '{where}.steps'")
        if written is None or run == 1.0:
            return []
        scaled = [scale_count(step, run) for step in written]
        if scaled == list(written):
            return []
        options["steps"] = scaled
        return [(f"{where}.steps", list(written), scaled)]

    def check(self, trainer) -> None:
        if self.steps is None:
            stop = trainer.schedule.densification_ends
            if stop is None:
                raise ConfigError("ContributionPruneHook: the strategy does not say "
                                  "when densification ends; give the hook's steps")
            self.steps = [int(stop)]

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if step not in self.steps:
            return
        started = time.perf_counter()
        frames = trainer.data.train_frames
        if 0 < self.max_views < len(frames):
            picks = torch.linspace(0, len(frames) - 1, self.max_views).round().long().tolist()
            frames = [frames[i] for i in picks]
        scores = blending_weights(trainer.model, trainer.renderer, [frame.camera for frame in frames])
        if trainer.world_size > 1:  # the same rows on every rank, whatever the renderer's rounding
            scores = torch.tensor(trainer.max_over_ranks(scores.tolist()), device=scores.device)
        count = len(scores)
        removed = math.floor(self.fraction * count)
        if removed == 0:
            return
        drop = torch.zeros(count, dtype=torch.bool, device=scores.device)
        drop[torch.argsort(scores, stable=True)[:removed]] = True
        trainer.remove_gaussians(drop)
        self.pruned.append((step, removed, count - removed))
        trainer.console.info(f"step {step}: pruned {removed:,} of {count:,} Gaussians by their share of the "
                             f"training images ({len(frames)} views, {time.perf_counter() - started:.1f} s)")

    def state_dict(self) -> Dict[str, Any]:
        return {"pruned": list(self.pruned)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.pruned = [tuple(entry) for entry in state.get("pruned", [])]
