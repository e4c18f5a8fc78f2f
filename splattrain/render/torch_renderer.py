"""The pure PyTorch renderer (``renderer.type: torch``): any device, the reference for the others."""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from ..cameras import Camera, stack_cameras
from ..model.gaussians import GaussianModel
from ..model.sh import spherical_harmonics
from ..registry import RENDERERS
from .base import Renderer, RenderResult


def sh_colors(model: GaussianModel, viewmats: Tensor, sh_degree: int) -> Tensor:
    """View-dependent RGB per camera [C, N, 3], as gsplat computes it (SH + 0.5, clamped at 0)."""
    rot = viewmats[:, :3, :3]
    campos = -torch.einsum("cji,cj->ci", rot, viewmats[:, :3, 3])  # [C, 3]
    dirs = model.means[None, :, :] - campos[:, None, :]  # [C, N, 3]
    coeffs = model.sh_coeffs[None].expand(viewmats.shape[0], -1, -1, -1)
    colors = spherical_harmonics(sh_degree, dirs, coeffs[:, :, : (sh_degree + 1) ** 2, :])
    return torch.clamp_min(colors + 0.5, 0.0)


@RENDERERS.register("torch", aliases=("TorchRenderer",))
class TorchRenderer(Renderer):
    """Pure PyTorch tile rasterizer: runs on any device, the reference for other backends."""

    supports_absgrad = True
    supports_pose_grad = True

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: bool = True
    ) -> RenderResult:
        from .torch_rasterizer import rasterize

        viewmats, Ks, width, height = stack_cameras(cameras)
        C = viewmats.shape[0]
        features = sh_colors(model, viewmats, sh_degree)  # [C, N, 3], then depth as a 4th channel
        backgrounds = background.expand(C, 3)
        if depth:
            depths = (torch.einsum("cij,nj->cni", viewmats[:, :3, :3], model.means) + viewmats[:, None, :3, 3])[..., 2:]
            features = torch.cat([features, depths], dim=-1)
            backgrounds = torch.cat([backgrounds, background.new_zeros(C, 1)], dim=-1)
        render, alpha, info = rasterize(
            model.means, model.quats, model.scales, model.opacities, features, viewmats, Ks, width, height,
            near_plane=self.near_plane, far_plane=self.far_plane, eps2d=self.eps2d, tile_size=self.tile_size,
            rasterize_mode=self.rasterize_mode, backgrounds=backgrounds, absgrad=self.absgrad,
        )
        expected_depth = render[..., 3:] / alpha.clamp_min(1e-10) if depth else None
        return RenderResult(rgb=render[..., :3], alpha=alpha, depth=expected_depth, info=info)
