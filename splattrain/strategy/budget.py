"""Densification toward a Gaussian budget with score-based selection (in the spirit of Taming 3DGS).

The 3DGS strategy grows every Gaussian whose mean image-plane gradient passes a threshold, so
how many Gaussians a run ends with depends on the scene, the run length and the schedule (and
is often far more than the images can constrain). This strategy instead decides, at every
refinement, how many Gaussians the scene should have by then (a curve from the starting count
to ``budget`` at ``refine_stop_iter``) and grows exactly that many: the ones with the highest
score. Pruning and opacity resets are the 3DGS strategy's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch
from torch import Tensor

from ..errors import ConfigError
from ..registry import STRATEGIES
from .default import DefaultStrategy
from .protocol import SceneFacts


@STRATEGIES.register("budget", aliases=("BudgetStrategy",))
@dataclass
class BudgetStrategy(DefaultStrategy):
    """Grow toward ``budget`` Gaussians, the highest-scoring first.

    ``budget``: a count, or ``auto``: one Gaussian per ``pixels_per_gaussian`` training pixels
    (all training views together; a starting scene already larger keeps its size less what is
    pruned). At a refinement at progress ``p`` in [0, 1] between ``refine_start_iter`` and
    ``refine_stop_iter`` the target is ``start + (budget - start) * (1 - (1 - p) ** growth_power)``
    (most growth early, when new Gaussians have the most steps left to settle).

    Score of a Gaussian: its image-plane gradient summed over the views that saw it since the
    last refinement (errors that persist across views) times its opacity (a Gaussian that hardly
    shows gains little from being divided). The highest-scoring are cloned when small (at most
    ``grow_scale3d`` x the scene scale) and split otherwise. ``max_gaussians`` (a cap a hook may
    lower) still bounds the target.
    """

    budget: Any = "auto"
    pixels_per_gaussian: float = 40.0
    growth_power: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.budget != "auto" and (isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1):
            raise ConfigError(f"key 'strategy.budget' must be a positive count or 'auto', got {self.budget!r}")
        if not self.pixels_per_gaussian > 0:
            raise ConfigError(f"key 'strategy.pixels_per_gaussian' must be > 0, got {self.pixels_per_gaussian}")
        if not self.growth_power > 0:
            raise ConfigError(f"key 'strategy.growth_power' must be > 0, got {self.growth_power}")
        self._resolved = self.budget if isinstance(self.budget, int) else 0

    def fit_to_scene(self, facts: SceneFacts) -> None:
        """Resolve ``budget: auto`` from the training pixels."""
        if self.budget == "auto":
            self._resolved = max(1, round(facts.train_pixels / self.pixels_per_gaussian))

    @property
    def resolved_budget(self) -> int:
        """The budget in Gaussians (``auto`` resolved; 0 until :meth:`fit_to_scene` for ``auto``)."""
        return self._resolved

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        """The 3DGS statistics plus the starting count (set at the first refinement)."""
        return {**super().initialize_state(scene_scale), "start_count": 0}

    def target(self, step: int, start_count: int) -> int:
        """How many Gaussians the scene should have after the refinement at ``step``."""
        budget = self._resolved or start_count
        if self.growth_cap > 0:
            budget = min(budget, self.growth_cap)
        span = max(self.refine_stop_iter - self.refine_start_iter, 1)
        progress = min(max((step - self.refine_start_iter) / span, 0.0), 1.0)
        reached = 1.0 - (1.0 - progress) ** self.growth_power
        return int(round(start_count + (budget - start_count) * reached)) if budget > start_count else budget

    @torch.no_grad()
    def grow(self, params, optimizers, state: Dict[str, Any], step: int) -> Tuple[int, int]:
        """Clone or split the highest-scoring Gaussians, as many as the target asks for."""
        count = len(state["grad2d"])
        if not state["start_count"]:
            state["start_count"] = count
        wanted = self.target(step, int(state["start_count"])) - count
        if wanted <= 0:
            return 0, 0
        chosen = self.highest_scores(params, state, wanted)
        is_small = self.is_small(params, state)
        return self.clone_and_split(params, optimizers, state, chosen & is_small, chosen & ~is_small)

    def highest_scores(self, params, state: Dict[str, Any], wanted: int) -> Tensor:
        """The ``wanted`` Gaussians of highest score among those with a gradient ([N] bool)."""
        score = state["grad2d"] * torch.sigmoid(params["opacities"].flatten())
        score = torch.where(score > 0, score, torch.full_like(score, -torch.inf))
        wanted = min(wanted, int((score > -torch.inf).sum()))
        chosen = torch.zeros_like(score, dtype=torch.bool)
        chosen[torch.argsort(score, descending=True, stable=True)[:wanted]] = True
        return chosen


__all__ = ["BudgetStrategy"]
