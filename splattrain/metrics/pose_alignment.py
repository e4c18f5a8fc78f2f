"""Test views scored after aligning their poses to the trained scene.

With pose refinement (``pose_opt``) the training cameras move off the given poses, and the scene
is learned where the corrected cameras agree; a test view keeps its own, unrefined pose error, which
then shows in its score however good the scene. Pose-refining methods therefore also report test
views whose pose was first fitted to the frozen scene; ``metrics.align_poses: N`` adds that score,
``aligned_psnr``, beside the plain one (which it never replaces).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..cameras import Camera
from ..errors import ConfigError
from ..view_opt.pose import SE3PoseRefinement
from .scores import psnr


def check_alignment(renderer: Any, steps: int) -> None:
    """ConfigError unless ``steps`` (``metrics.align_poses``) is a count and ``renderer`` passes
    gradients to camera poses."""
    if steps < 0:
        raise ConfigError(f"metrics.align_poses must be 0 (off) or a number of steps, not {steps}")
    if steps and not getattr(renderer, "supports_pose_grad", False):
        raise ConfigError(f"metrics.align_poses needs a renderer that differentiates through camera poses; "
                          f"{type(renderer).__name__} does not (the built-in cpu, torch and gsplat renderers do)")


def aligned_camera(renderer: Any, model: Any, camera: Camera, image: Tensor, sh_degree: int, background: Tensor,
                   steps: int, lr: float = 1e-3, mask: Optional[Tensor] = None) -> Camera:
    """``camera`` with the pose correction (:class:`~splattrain.view_opt.pose.SE3PoseRefinement`'s,
    turning about what it looks at) that ``steps`` Adam steps on the L1 error against ``image``
    [1,H,W,3] find, the scene frozen; the rate decays from ``lr`` to a tenth."""
    check_alignment(renderer, steps)
    correction = SE3PoseRefinement(1, lr=lr, lr_final=lr / 10)
    correction.setup([camera], model.means.detach(), 1.0)
    correction.to(camera.viewmat.device)
    optimizer = torch.optim.Adam([correction.delta], lr=lr)
    view = torch.zeros(1, dtype=torch.long)
    with torch.enable_grad():
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = lr * 0.1 ** (step / max(1, steps))
            rgb = renderer.render(model, correction.apply([camera], view), sh_degree, background).rgb
            error = (rgb - image).abs()
            loss = error.mean() if mask is None else (error * mask).sum() / (mask.sum() * 3).clamp_min(1)
            (correction.delta.grad,) = torch.autograd.grad(loss, [correction.delta])
            optimizer.step()
    with torch.no_grad():
        moved = correction.apply([camera], view)[0]
    return Camera(viewmat=moved.viewmat.detach(), K=camera.K, width=camera.width, height=camera.height,
                  name=camera.name)


def aligned_psnr(renderer: Any, model: Any, batch: dict, sh_degree: int, background: Tensor, steps: int) -> float:
    """The PSNR of a one-view batch's image rendered from its :func:`aligned_camera`."""
    camera = aligned_camera(renderer, model, batch["camera"][0], batch["image"], sh_degree, background, steps,
                            mask=batch.get("mask"))
    with torch.no_grad():
        rgb = renderer.render(model, [camera], sh_degree, background).rgb
    return psnr(rgb, batch["image"], batch.get("mask"))
