"""A densification strategy in its minimal form: gsplat's three calls and nothing else.

Every ``every`` steps until ``stop`` it clones the ``fraction`` of Gaussians with the largest
mean image-plane gradient since the last refinement and removes those fainter than
``min_opacity``. Load it with ``imports: [examples/my_strategy.py]`` and
``strategy: {type: clone_top, every: 100, stop: 1500}`` (configs/demo_strategy.yaml);
docs/extending.md walks through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import torch

from splattrain import ConfigError, STRATEGIES, Strategy
from splattrain.steps import Steps, Window


@STRATEGIES.register("clone_top")
@dataclass
class CloneTopStrategy(Strategy):
    """Clone the Gaussians with the largest image-plane gradients, drop the faint ones."""

    every: Window = 100  # steps of gradient statistics per refinement
    stop: Steps = 1500  # no refinement from this step on (follows the run's length)
    fraction: float = 0.05
    min_opacity: float = 0.005

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ConfigError(f"strategy.fraction must be in (0, 1], got {self.fraction}")

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        return {"grad": None, "seen": None}  # per-Gaussian sums since the last refinement

    def step_pre_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Dict[str, Any]) -> None:
        info["means2d"].retain_grad()  # the densification signal

    @torch.no_grad()
    def step_post_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Dict[str, Any],
                           context=None) -> None:
        if step >= self.stop:
            return
        seen = (info["radii"] > 0).all(dim=-1)  # [C, N]
        norms = info["means2d"].grad.norm(dim=-1) * seen  # [C, N]
        self.add_statistics(state, grad=norms.sum(dim=0), seen=seen.sum(dim=0))  # summed over the ranks
        if step % self.every:
            return
        mean = state["grad"] / state["seen"].clamp_min(1)
        top = torch.zeros_like(mean, dtype=torch.bool)
        top[mean.topk(max(1, int(self.fraction * len(mean)))).indices] = True
        self.clone_gaussians(params, optimizers, state, top)  # Adam state, statistics and listeners follow
        faint = torch.sigmoid(params["opacities"].flatten()) < self.min_opacity
        if faint.any():
            self.remove_gaussians(params, optimizers, state, faint)
        state["grad"].zero_()
        state["seen"].zero_()
