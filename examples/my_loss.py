"""An example loss term: edge-aware smoothness of the rendered depth.

Load it from a config with ``imports: [examples/my_loss.py]`` and add
``{type: depth_smoothness, weight: 0.05}`` to ``loss.terms``; docs/extending.md walks through it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from splattrain import LOSSES, ConfigError, LossTerm


@LOSSES.register("depth_smoothness")
class EdgeAwareDepthSmoothness(LossTerm):
    """Edge-aware total variation of the rendered depth (depth may jump where colour does).

    Neighbouring pixels should lie at similar depths unless the photograph has an edge between
    them. Depth differences are divided by the view's mean depth (so the weight does not depend on
    the scene's scale) and weighted by ``exp(-edge_sharpness * |colour difference|)`` and by
    the rendered opacity of both pixels (the background has no depth).
    """

    needs_depth = True  # the trainer then renders depth in training steps too

    def __init__(self, weight: float = 1.0, edge_sharpness: float = 10.0) -> None:
        super().__init__(weight)
        if not edge_sharpness >= 0.0:
            raise ConfigError(f"loss term depth_smoothness: edge_sharpness must be >= 0, got {edge_sharpness}")
        self.edge_sharpness = edge_sharpness

    def __call__(self, render, batch, model) -> Tensor:
        depth = render.depth  # [C, H, W, 1]
        depth = depth / depth.detach().mean(dim=(1, 2, 3), keepdim=True).clamp_min(1e-6)
        image, alpha = batch["image"], render.alpha.detach()
        valid = alpha if "mask" not in batch else alpha * batch["mask"]
        total = depth.new_zeros(())
        for dim in (1, 2):  # rows, then columns
            n = depth.shape[dim] - 1
            step = depth.narrow(dim, 1, n) - depth.narrow(dim, 0, n)
            colour = (image.narrow(dim, 1, n) - image.narrow(dim, 0, n)).abs().mean(dim=-1, keepdim=True)
            weight = torch.exp(-self.edge_sharpness * colour) * valid.narrow(dim, 1, n) * valid.narrow(dim, 0, n)
            total = total + (step.abs() * weight).mean()
        return total
