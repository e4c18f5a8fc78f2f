"""The 3DGS densification strategy: clone small and split large Gaussians with high image-plane
gradients, prune transparent or huge ones, reset opacities periodically."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch
from torch import Tensor

from ..registry import STRATEGIES
from ..errors import ConfigError
from ..steps import Count, Steps, Window
from . import ops
from .protocol import Info, Strategy
from .statistics import accumulate_packed, accumulate_visible


@STRATEGIES.register("default", aliases=("DefaultStrategy",))
@dataclass
class DefaultStrategy(Strategy):
    """3DGS densification (clone / split / prune / opacity reset), as in gsplat's DefaultStrategy.

    Every ``refine_every`` steps after ``refine_start_iter`` and before ``refine_stop_iter``:
    Gaussians whose mean image-plane gradient exceeds ``grow_grad2d`` are cloned (largest scale at
    most ``grow_scale3d`` x the scene scale) or split in two (larger ones); Gaussians with
    opacity below ``prune_opa`` are removed, and after the first reset also those larger than
    ``prune_scale3d`` x the scene scale. Every ``reset_every`` steps while refining, opacities
    are clamped to 2 x ``prune_opa`` (the 3DGS paper's reset). With ``max_gaussians`` > 0 growth
    stops at the cap: the candidates with the largest gradients go first. ``absgrad`` uses
    absolute gradients (AbsGS; raise ``grow_grad2d`` to about 0.0008). ``refine_stop_max`` > 0
    ends refinement by that step however long the run (it is not scaled with the run):
    ``refine_stop_iter`` becomes the smaller of the two, and ``refine_start_iter`` is at most a
    quarter of it, so that a run long enough to scale the start past the bound still refines.
    """

    prune_opa: float = 0.005
    grow_grad2d: float = 0.0002
    grow_scale3d: float = 0.01
    grow_scale2d: float = 0.05
    prune_scale3d: float = 0.1
    prune_scale2d: float = 0.15
    refine_scale2d_stop_iter: Steps = 0
    refine_start_iter: Steps = 500
    refine_stop_iter: Steps = 15_000
    reset_every: Steps = 3000
    refine_every: Window = 100
    pause_refine_after_reset: Steps = 0
    absgrad: bool = False
    revised_opacity: bool = False
    max_gaussians: int = 0
    refine_stop_max: Count = 0

    supports_cap = True

    def __post_init__(self) -> None:
        if self.refine_stop_max < 0:
            raise ConfigError(f"key 'strategy.refine_stop_max' must be >= 0 (0: no bound), got {self.refine_stop_max}")
        if self.refine_stop_max > 0:
            self.refine_stop_iter = min(self.refine_stop_iter, self.refine_stop_max)
            self.refine_start_iter = min(self.refine_start_iter, self.refine_stop_max // 4)

    def refines_at(self, step: int) -> bool:
        """Clone, split and prune after ``step``: every ``refine_every`` steps after
        ``refine_start_iter`` and before ``refine_stop_iter`` (not within ``pause_refine_after_reset``
        steps after an opacity reset)."""
        return (self.refine_start_iter < step < self.refine_stop_iter and step % self.refine_every == 0
                and step % self.reset_every >= self.pause_refine_after_reset)

    def resets_at(self, step: int) -> bool:
        """Reset the opacities after ``step``: every ``reset_every`` steps before ``refine_stop_iter``."""
        return 0 < step < self.refine_stop_iter and step % self.reset_every == 0

    def last_event_step(self, max_steps: int) -> int:
        """No refinement or reset at or after ``refine_stop_iter``."""
        return min(max_steps, self.refine_stop_iter - 1)

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        """Running sums of image-plane gradient norms and visibility counts (allocated at first use)."""
        state: Dict[str, Any] = {"grad2d": None, "count": None, "scene_scale": scene_scale}
        if self.refine_scale2d_stop_iter > 0:
            state["radii"] = None
        return state

    def step_pre_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info) -> None:
        """Keep the gradient of ``info["means2d"]`` (the densification signal)."""
        info["means2d"].retain_grad()

    def step_post_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info,
                           context: Any = None) -> None:
        """Accumulate this batch, then grow, prune and reset when due."""
        if step >= self.refine_stop_iter:
            return
        self.accumulate(params, state, step, info)
        if self.refines_at(step):
            self.sync_statistics(state)  # ranks accumulate locally and combine only to decide
            self.grow(params, optimizers, state, step)
            self.prune(params, optimizers, state, step)
            state["grad2d"].zero_()
            state["count"].zero_()
            if self.refine_scale2d_stop_iter > 0:
                state["radii"].zero_()
        if self.resets_at(step):
            ops.reset_opacity(params, optimizers, value=self.prune_opa * 2.0)

    def reduced_statistics(self, state: Dict[str, Any]) -> Dict[str, str]:
        """Gradient sums and visibility counts add up across ranks; the largest radii are kept."""
        modes = {"grad2d": "sum", "count": "sum"}
        if "radii" in state:
            modes["radii"] = "max"
        return modes

    @torch.no_grad()
    def accumulate(self, params, state: Dict[str, Any], step: int, info: Info) -> None:
        """Add the batch's image-plane gradient norms (in [-1, 1] screen units, times the step's
        view count) and visibility to the running sums."""
        if step >= self.refine_stop_iter:
            return
        means2d = info["means2d"]
        grads = means2d.absgrad if self.absgrad else means2d.grad
        count = len(params["means"])
        if state["grad2d"] is None:
            state["grad2d"] = torch.zeros(count, device=grads.device)
        if state["count"] is None:
            state["count"] = torch.zeros(count, device=grads.device)
        track_radii = self.refine_scale2d_stop_iter > 0
        if track_radii and state["radii"] is None:
            state["radii"] = torch.zeros(count, device=grads.device)
        if info.get("gaussian_ids") is not None:  # packed: one row per visible (camera, Gaussian)
            accumulate_packed(state, grads, info["radii"], info["gaussian_ids"], info["width"], info["height"],
                              info["n_cameras"], track_radii)
        else:
            accumulate_visible(state, grads, info["radii"], info["width"], info["height"], info["n_cameras"],
                               track_radii)

    @torch.no_grad()
    def grow(self, params, optimizers, state: Dict[str, Any], step: int) -> Tuple[int, int]:
        """Clone and split the candidates (within the cap); returns (cloned, split)."""
        grads = state["grad2d"] / state["count"].clamp_min(1)
        is_grad_high = grads > self.grow_grad2d
        is_small = self.is_small(params, state)
        is_dupli = is_grad_high & is_small
        is_split = is_grad_high & ~is_small
        if step < self.refine_scale2d_stop_iter:
            is_split |= state["radii"] > self.grow_scale2d
        is_dupli, is_split = self._within_cap(is_dupli, is_split, grads)
        return self.clone_and_split(params, optimizers, state, is_dupli, is_split)

    def is_small(self, params, state: Dict[str, Any]) -> Tensor:
        """Gaussians small enough to be cloned rather than split ([N] bool)."""
        return torch.exp(params["scales"]).max(dim=-1).values <= self.grow_scale3d * state["scene_scale"]

    def clone_and_split(self, params, optimizers, state: Dict[str, Any], is_dupli: Tensor,
                        is_split: Tensor) -> Tuple[int, int]:
        """Clone the Gaussians of ``is_dupli`` and split those of ``is_split`` (disjoint masks);
        returns (cloned, split)."""
        n_dupli = self.clone_gaussians(params, optimizers, state, is_dupli)
        is_split = torch.cat([is_split, is_split.new_zeros(n_dupli)])  # clones are not split
        return n_dupli, self.split_gaussians(params, optimizers, state, is_split)

    def _within_cap(self, is_dupli: Tensor, is_split: Tensor, grads: Tensor) -> Tuple[Tensor, Tensor]:
        """Keep the candidates with the largest gradients that fit under the growth cap."""
        if self.growth_cap <= 0:
            return is_dupli, is_split
        candidates = is_dupli | is_split
        budget = max(self.growth_cap - len(grads), 0)  # clone and split both add one Gaussian
        if int(candidates.sum()) <= budget:
            return is_dupli, is_split
        ranked = torch.where(candidates, grads, torch.full_like(grads, -torch.inf))
        keep = torch.zeros_like(candidates)
        keep[torch.argsort(ranked, descending=True, stable=True)[:budget]] = True
        return is_dupli & keep, is_split & keep

    @torch.no_grad()
    def prune(self, params, optimizers, state: Dict[str, Any], step: int) -> int:
        """Remove transparent Gaussians (and, after the first reset, huge ones); returns the count."""
        is_prune = torch.sigmoid(params["opacities"].flatten()) < self.prune_opa
        if step > self.reset_every:
            is_prune |= torch.exp(params["scales"]).max(dim=-1).values > self.prune_scale3d * state["scene_scale"]
            if step < self.refine_scale2d_stop_iter:
                is_prune |= state["radii"] > self.prune_scale2d
        n_prune = int(is_prune.sum())
        if n_prune > 0:
            self.remove_gaussians(params, optimizers, state, is_prune)
        return n_prune
