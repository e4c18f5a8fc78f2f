"""MCMC densification ("3D Gaussian Splatting as Markov Chain Monte Carlo", Kheradmand et al. 2024)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

import torch

from ..errors import ConfigError
from ..registry import STRATEGIES
from ..steps import Steps, Window
from . import relocation
from .protocol import Info, Strategy


@STRATEGIES.register("mcmc", aliases=("MCMCStrategy",))
@dataclass
class MCMCStrategy(Strategy):
    """MCMC densification: relocate dead Gaussians, grow 5% per refinement up to ``max_gaussians``.

    Every ``refine_every`` steps between ``refine_start_iter`` and ``refine_stop_iter``, Gaussians
    with opacity <= ``min_opacity`` move onto live ones drawn by opacity, then 5% more are added,
    up to ``max_gaussians`` (required). Every step, nearly transparent Gaussians get position noise
    scaled by the current means learning rate times ``noise_lr``. Without ``loss.terms`` in the
    config, the paper's regularisers are added to the loss (``opacity_reg`` and ``scale_reg``,
    weight 0.01 each).
    """

    max_gaussians: int = 0
    min_opacity: float = 0.005
    noise_lr: float = 5e5
    refine_start_iter: Steps = 500
    refine_stop_iter: Steps = 25_000
    refine_every: Window = 100

    supports_cap = True

    def refines_at(self, step: int) -> bool:
        """Relocate and grow after ``step``: every ``refine_every`` steps between ``refine_start_iter``
        and ``refine_stop_iter``."""
        return self.refine_start_iter < step < self.refine_stop_iter and step % self.refine_every == 0

    def last_event_step(self, max_steps: int) -> int:
        """No relocation at or after ``refine_stop_iter``."""
        return min(max_steps, self.refine_stop_iter - 1)

    def __post_init__(self) -> None:
        if self.max_gaussians <= 0:
            raise ConfigError("strategy mcmc needs strategy.max_gaussians > 0 (the number of Gaussians it grows to)")

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        """The binomial table of Eq. 9 (``scene_scale`` is unused: MCMC does not look at sizes)."""
        return {"binoms": relocation.binomial_table()}

    def per_gaussian(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """Nothing: the binomial table is not per Gaussian."""
        return {}

    def default_loss_terms(self) -> List[Dict[str, Any]]:
        """The paper's opacity and scale regularisers."""
        return [{"type": "opacity_reg", "weight": 0.01}, {"type": "scale_reg", "weight": 0.01}]

    def step_post_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info,
                           context: Any = None) -> None:
        """Relocate and add Gaussians when due, then add position noise at the current means rate."""
        state["binoms"] = binoms = state["binoms"].to(params["means"].device)
        if self.refines_at(step):
            dead = torch.sigmoid(params["opacities"].flatten()) <= self.min_opacity
            if dead.any():
                self.reindexed(relocation.relocate(params, optimizers, dead, binoms, self.min_opacity), params)
            count = len(params["means"])
            n_new = min(self.growth_cap, int(1.05 * count)) - count
            if n_new > 0:
                self.reindexed(relocation.sample_add(params, optimizers, n_new, binoms, self.min_opacity), params)
        lr = optimizers["means"].param_groups[0]["lr"]
        relocation.inject_noise(params, lr * self.noise_lr)
