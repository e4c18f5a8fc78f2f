"""An error-driven densification hook: grow the Gaussians that cover the largest training-image
error, through the trainer's row calls, beside whatever strategy the run uses.

After each validation (``every: 0``) or every ``every`` steps, until ``stop``, it renders up to
``max_views`` training views, scores each Gaussian by the mean absolute error of the pixels it
paints (weighted by its compositing weights, as in splattrain/render/contribution.py) and grows
the ``fraction`` with the highest scores: clones the small ones, splits the others. Load it with
``imports: [examples/error_densify.py]`` and ``custom_hooks: [{type: ErrorDensifyHook, every: 100}]``;
docs/extending.md walks through it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from splattrain import ConfigError, GaussianModel, HOOKS, Hook
from splattrain.model.gaussians import SH_C0
from splattrain.steps import Steps


def error_scores(model: GaussianModel, renderer, views: Sequence[Tuple[Any, Tensor]], min_pixels: float) -> Tensor:
    """Per Gaussian [N]: the mean error of the pixels it paints in ``views`` ((camera, error [H, W])
    pairs), each pixel weighted by the Gaussian's compositing weight there; 0 for a Gaussian that
    paints less than ``min_pixels`` pixels' worth.

    With every colour 0.5 over black, the gradient of ``sum(rgb[..., c] * g_c)`` with respect to a
    Gaussian's DC colour is proportional to ``sum_pixels weight * g_c``: one render per view gives
    both sums, with ``g_0 = 1`` and ``g_1 = error``.
    """
    params = {name: value.detach() for name, value in model.params.items()}
    probe = GaussianModel({**params, "sh0": torch.zeros_like(params["sh0"])}, model.sh_degree)
    for name, value in probe.params.items():
        value.requires_grad_(name == "sh0")
    black = torch.zeros(3, device=params["means"].device)
    with torch.enable_grad():
        for camera, error in views:
            rgb = renderer.render(probe, [camera], 0, black, depth=False).rgb[0]  # [H, W, 3]
            (rgb * torch.stack([torch.ones_like(error), error, torch.zeros_like(error)], dim=-1)).sum().backward()
    grad = probe.params["sh0"].grad
    if grad is None:
        return torch.zeros(model.num_gaussians, device=black.device)
    painted, covered = grad[:, 0, 0], grad[:, 0, 1]
    enough = painted >= min_pixels * SH_C0  # the gradient is SH_C0 x the weights
    return torch.where(enough, covered / painted.clamp_min(1e-12), torch.zeros_like(painted))


@HOOKS.register()
class ErrorDensifyHook(Hook):
    """Clone or split the Gaussians that cover the largest training-image error."""

    priority = "BELOW_NORMAL"

    def __init__(self, every: Steps = 0, stop: Steps = 1500, fraction: float = 0.02, max_views: int = 8,
                 grow_scale3d: float = 0.01, min_pixels: float = 1.0) -> None:
        super().__init__()
        if not 0 < fraction <= 1:
            raise ConfigError(f"ErrorDensifyHook: fraction must be in (0, 1], got {fraction}")
        if every < 0 or max_views < 1:
            raise ConfigError(f"ErrorDensifyHook: every must be >= 0 and max_views >= 1, got {every}, {max_views}")
        self.every, self.stop, self.fraction, self.max_views = every, stop, fraction, max_views
        self.grow_scale3d, self.min_pixels = grow_scale3d, min_pixels
        self.grown: List[Tuple[int, int, int]] = []  # (step, cloned, split)

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.every and self.every_n_steps(trainer, self.every):
            self.densify(trainer, step)

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        if not self.every:
            self.densify(trainer, trainer.step)

    def densify(self, trainer, step: int) -> None:
        if step >= self.stop or self.is_last_step(trainer):
            return
        scores = error_scores(trainer.model, trainer.renderer, self.errors(trainer, step), self.min_pixels)
        if trainer.world_size > 1:  # the same rows on every rank, whatever the renderer's rounding
            scores = torch.tensor(trainer.max_over_ranks(scores.tolist()), device=scores.device)
        wanted = min(max(1, int(self.fraction * len(scores))), int((scores > 0).sum()))
        chosen = torch.zeros_like(scores, dtype=torch.bool)
        chosen[torch.argsort(scores, descending=True, stable=True)[:wanted]] = True
        small = torch.exp(trainer.model.params["scales"]).max(dim=-1).values <= self.grow_scale3d * trainer.scene_scale
        count = trainer.model.num_gaussians
        trainer.clone_gaussians(chosen & small)  # the copies are appended: they are not split
        grown = trainer.model.num_gaussians - count
        trainer.split_gaussians(torch.cat([chosen & ~small, chosen.new_zeros(grown)]))
        self.grown.append((step, int((chosen & small).sum()), int((chosen & ~small).sum())))
        trainer.console.info(f"step {step}: grew {wanted:,} Gaussians over the largest training error "
                             f"({self.grown[-1][1]:,} cloned, {self.grown[-1][2]:,} split)")

    @torch.no_grad()
    def errors(self, trainer, step: int) -> List[Tuple[Any, Tensor]]:
        """(camera, mean absolute error per pixel) of up to ``max_views`` training views, spread
        over the list, rendered over the validation background."""
        frames = trainer.data.train_frames
        picks = torch.linspace(0, len(frames) - 1, min(self.max_views, len(frames))).round().long().tolist()
        background, degree = trainer.background, trainer.schedule.sh_degree_at(step)
        views = []
        for index in picks:
            camera = frames[index].camera.to(trainer.device)
            image = torch.tensor(frames[index].pixels(), device=trainer.device).float() / 255.0
            if image.shape[-1] == 4:  # composite over the background, as training batches are
                image = image[..., :3] * image[..., 3:] + background * (1.0 - image[..., 3:])
            render = trainer.renderer.render(trainer.model, [camera], degree, background, depth=False)
            views.append((camera, (render.rgb[0] - image).abs().mean(dim=-1)))
        return views

    def state_dict(self) -> Dict[str, Any]:
        return {"grown": [list(entry) for entry in self.grown]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.grown = [tuple(int(v) for v in entry) for entry in state.get("grown", [])]
