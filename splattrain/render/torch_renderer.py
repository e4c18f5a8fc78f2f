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
from .outputs import EXTRA_OUTPUTS, DepthArg, Wanted, extra_features, result_fields


def sh_colors(model: GaussianModel, viewmats: Tensor, sh_degree: int) -> Tensor:
    """View-dependent RGB per camera [C, N, 3], as gsplat computes it (SH + 0.5, clamped at 0)."""
    rot = viewmats[:, :3, :3]
    campos = -torch.einsum("cji,cj->ci", rot, viewmats[:, :3, 3])  # [C, 3]
    dirs = model.means[None, :, :] - campos[:, None, :]  # [C, N, 3]
    coeffs = model.sh_coeffs[None].expand(viewmats.shape[0], -1, -1, -1)
    colors = spherical_harmonics(sh_degree, dirs, coeffs[:, :, : (sh_degree + 1) ** 2, :])
    return torch.clamp_min(colors + 0.5, 0.0)


def render_torch(renderer: Renderer, model: GaussianModel, viewmats: Tensor, Ks: Tensor, width: int, height: int,
                 sh_degree: int, background: Tensor, wanted: Wanted) -> RenderResult:
    """The PyTorch rasterizer's render with ``renderer``'s settings (also gsplat's median depth)."""
    from .torch_rasterizer import rasterize

    C = viewmats.shape[0]
    features = sh_colors(model, viewmats, sh_degree)  # [C, N, 3], then the extra channels
    backgrounds = background.expand(C, 3)
    scales = model.scales  # one exp a render, shared by the rasterizer and the normals
    extra, reference = extra_features(wanted, model.means, model.quats, scales, viewmats)
    if extra is not None:
        features = torch.cat([features, extra], dim=-1)
        backgrounds = torch.cat([backgrounds, background.new_zeros(C, extra.shape[-1])], dim=-1)
    render, alpha, info = rasterize(
        model.means, model.quats, scales, model.opacities, features, viewmats, Ks, width, height,
        near_plane=renderer.near_plane, far_plane=renderer.far_plane, eps2d=renderer.eps2d,
        tile_size=renderer.tile_size, rasterize_mode=renderer.rasterize_mode, backgrounds=backgrounds,
        absgrad=renderer.absgrad, median_channel=3 if wanted.median else None,
    )
    median = info.pop("median", None)
    return RenderResult(info=info, **result_fields(wanted, render, alpha, reference, median))


@RENDERERS.register("torch", aliases=("TorchRenderer",))
class TorchRenderer(Renderer):
    """Pure PyTorch tile rasterizer: runs on any device, the reference for other backends."""

    supports_absgrad = True
    supports_pose_grad = True
    supported_extras = frozenset(EXTRA_OUTPUTS)

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: DepthArg = True
    ) -> RenderResult:
        viewmats, Ks, width, height = stack_cameras(cameras)
        wanted = Wanted.of(depth, self.extra_outputs)
        return render_torch(self, model, viewmats, Ks, width, height, sh_degree, background, wanted)
