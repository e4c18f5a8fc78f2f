"""An example densification strategy: the 3DGS default, plus pruning of Gaussians that stay
smaller than a pixel on screen.

Load it from a config with ``imports: [examples/tiny_prune.py]`` and set
``strategy: {type: tiny_prune, tiny_radius: 2, patience: 3, ...}``; docs/extending.md walks
through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import torch

from splattrain import STRATEGIES, ConfigError
from splattrain.strategy import DefaultStrategy


@STRATEGIES.register("tiny_prune")
@dataclass
class TinyPruneStrategy(DefaultStrategy):
    """DefaultStrategy plus pruning of Gaussians that stay tiny on screen for several refinements.

    A Gaussian is tiny when its screen radius stayed at or below ``tiny_radius`` pixels in every
    view that saw it since the last refinement; it goes after ``patience`` tiny refinements in a row
    (radii are whole pixels, rounded up, of the footprint after the renderer's 0.3 px^2
    low-pass filter: even a point has radius 2, and an opaque Gaussian has radius 2 when its
    own standard deviation on screen is under about 0.4 px).

    Per Gaussian it keeps, in the strategy state, the largest radius seen since the last
    refinement (``max_radius``) and the number of refinements in a row it was tiny
    (``tiny_count``); the densification ops carry both through clones, splits and prunes
    (copies inherit the count), and checkpoints keep them. ``tiny_pruned`` counts the removals.
    """

    tiny_radius: float = 2.0
    patience: int = 3

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ConfigError(f"strategy.patience must be >= 1, got {self.patience}")

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        state = super().initialize_state(scene_scale)
        state.update(max_radius=None, tiny_count=None, tiny_pruned=0)
        return state

    @torch.no_grad()
    def accumulate(self, params, state: Dict[str, Any], step: int, info: Dict[str, Any]) -> None:
        super().accumulate(params, state, step, info)
        if step >= self.refine_stop_iter:
            return
        if state["max_radius"] is None:
            state["max_radius"] = torch.zeros(len(params["means"]), device=params["means"].device)
            state["tiny_count"] = torch.zeros_like(state["max_radius"], dtype=torch.int32)
        radii = info["radii"].max(dim=-1).values.float()  # [C, N] (packed: [nnz])
        ids = info["gaussian_ids"] if info.get("gaussian_ids") is not None else None
        if ids is None:
            radii = radii.max(dim=0).values  # the largest over the batch's views
            ids = torch.arange(len(radii), device=radii.device)
        state["max_radius"].scatter_reduce_(0, ids, radii, reduce="amax")

    @torch.no_grad()
    def prune(self, params, optimizers, state: Dict[str, Any], step: int) -> int:
        """The default pruning, then the Gaussians tiny for ``patience`` refinements in a row."""
        n_pruned = super().prune(params, optimizers, state, step)
        seen = state["max_radius"] > 0  # Gaussians no view saw keep their count
        tiny = seen & (state["max_radius"] <= self.tiny_radius)
        state["tiny_count"] = torch.where(tiny, state["tiny_count"] + 1, torch.where(seen, 0, state["tiny_count"]))
        state["max_radius"].zero_()
        is_prune = state["tiny_count"] >= self.patience
        n_tiny = int(is_prune.sum())
        if n_tiny > 0:
            self.remove_gaussians(params, optimizers, state, is_prune)
            state["tiny_pruned"] += n_tiny
        return n_pruned + n_tiny
