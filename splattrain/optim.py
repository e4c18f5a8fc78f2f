"""One Adam per Gaussian parameter group, and the 3DGS position learning-rate decay."""

from __future__ import annotations

from typing import Dict

import torch

from .model.gaussians import GaussianModel


def build_optimizers(model: GaussianModel, optim_cfg, scene_scale: float) -> Dict[str, torch.optim.Adam]:
    """An Adam per parameter (as gsplat's strategies expect); the means LR is scaled by ``scene_scale``."""
    lrs = {
        "means": optim_cfg.means_lr * scene_scale,
        "scales": optim_cfg.scales_lr,
        "quats": optim_cfg.quats_lr,
        "opacities": optim_cfg.opacities_lr,
        "sh0": optim_cfg.sh0_lr,
        "shN": optim_cfg.shN_lr,
    }
    return {
        name: torch.optim.Adam([{"params": [param], "lr": lrs[name], "name": name}], eps=optim_cfg.eps)
        for name, param in model.params.items()
    }


class ExponentialDecayLR:
    """Learning rate decaying exponentially from ``lr_init`` to ``lr_final`` at ``max_steps``.

    Stateless: the rate is a function of the step alone, so resuming needs no state.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, lr_init: float, lr_final: float, max_steps: int) -> None:
        self.optimizer = optimizer
        self.lr_init = lr_init
        self.lr_final = lr_final
        self.max_steps = max(1, max_steps)

    def lr_at(self, step: int) -> float:
        t = min(max(step, 0) / self.max_steps, 1.0)
        return self.lr_init * (self.lr_final / self.lr_init) ** t

    def step(self, step: int) -> None:
        """Set the rate for the step after ``step``."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(step)


def build_schedulers(optimizers: Dict[str, torch.optim.Adam], optim_cfg, scene_scale: float, max_steps: int) -> list:
    """The position schedule of the 3DGS paper (1.6e-4 -> 1.6e-6, times the scene scale)."""
    return [
        ExponentialDecayLR(
            optimizers["means"], optim_cfg.means_lr * scene_scale, optim_cfg.means_lr_final * scene_scale, max_steps
        )
    ]
