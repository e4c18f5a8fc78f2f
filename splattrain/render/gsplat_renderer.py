"""gsplat's CUDA rasterizer (``renderer.type: gsplat``), through its public ``rasterization``."""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from ..cameras import Camera, stack_cameras
from ..model.gaussians import GaussianModel
from ..registry import RENDERERS
from .base import Renderer, RenderResult
from .outputs import EXTRA_OUTPUTS, DepthArg, Wanted, extra_features, result_fields
from .torch_renderer import render_torch, sh_colors


@RENDERERS.register("gsplat", aliases=("GsplatRenderer",))
class GsplatRenderer(Renderer):
    """gsplat's CUDA rasterizer (needs a CUDA device).

    Besides the common options: ``packed`` (gsplat's memory-saving packed mode: per-visible
    Gaussian intermediates instead of [C, N] ones) and ``sparse_grad`` (gsplat's projection returns
    sparse gradients for rotations and scales; needs ``packed``). splattrain's Adam optimizers take
    dense gradients, so those are made dense where they leave gsplat: ``sparse_grad`` trains exactly
    like ``packed`` alone and saves no memory of its own.

    Median depth: gsplat's 3DGS ``rasterization`` has none, so ``depth='median'`` (or ``'both'``)
    renders it with splattrain's PyTorch rasterizer on the same device (same projection and
    compositing rules, no gradient): a second, slower pass for export and ``render``, never in
    training. Normals and distortion are composited by gsplat as extra colour channels.
    """

    supports_absgrad = True
    supports_pose_grad = True
    supported_extras = frozenset(EXTRA_OUTPUTS)

    def __init__(
        self,
        rasterize_mode: str = "classic",
        tile_size: int = 16,
        near_plane: float = 0.01,
        far_plane: float = 1e10,
        eps2d: float = 0.3,
        packed: bool = False,
        sparse_grad: bool = False,
    ) -> None:
        super().__init__(rasterize_mode, tile_size, near_plane, far_plane, eps2d)
        if sparse_grad and not packed:
            from ..errors import ConfigError

            raise ConfigError("renderer.sparse_grad needs renderer.packed: true")
        self.packed = packed
        self.sparse_grad = sparse_grad

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: DepthArg = True
    ) -> RenderResult:
        from gsplat import rasterization

        viewmats, Ks, width, height = stack_cameras(cameras)
        C = viewmats.shape[0]
        wanted = Wanted.of(depth, self.extra_outputs)
        composited = Wanted(expected=wanted.expected, normals=wanted.normals, distortion=wanted.distortion)
        means, quats, scales = model.means, model.quats, model.scales
        if self.sparse_grad:
            means, quats, scales = (DenseGrad.apply(t) for t in (means, quats, scales))
        options = dict(
            near_plane=self.near_plane, far_plane=self.far_plane, eps2d=self.eps2d, tile_size=self.tile_size,
            rasterize_mode=self.rasterize_mode, packed=self.packed, sparse_grad=self.sparse_grad, absgrad=self.absgrad,
        )
        if not (wanted.normals or wanted.distortion):  # gsplat evaluates the SH and the expected depth itself
            render, alpha, info = rasterization(
                means, quats, scales, model.opacities, model.sh_coeffs, viewmats, Ks, width, height,
                sh_degree=sh_degree, backgrounds=background.expand(C, 3),
                render_mode="RGB+ED" if wanted.expected else "RGB", **options,
            )
            fields = {"rgb": render[..., :3], "alpha": alpha, "depth": render[..., 3:] if wanted.expected else None}
        else:  # the extra channels composited as colours beside the SH colours
            extra, reference = extra_features(composited, model.means, model.quats, model.scales, viewmats)
            colors = torch.cat([sh_colors(model, viewmats, sh_degree), extra], dim=-1)
            backgrounds = torch.cat([background.expand(C, 3), background.new_zeros(C, extra.shape[-1])], dim=-1)
            render, alpha, info = rasterization(
                means, quats, scales, model.opacities, colors, viewmats, Ks, width, height,
                sh_degree=None, backgrounds=backgrounds, render_mode="RGB", **options,
            )
            fields = result_fields(composited, render, alpha, reference)
        if wanted.median:
            with torch.no_grad():
                fields["median_depth"] = render_torch(self, model, viewmats.detach(), Ks, width, height, sh_degree,
                                                      background, Wanted(median=True)).median_depth
        return RenderResult(info=info, **fields)


class DenseGrad(torch.autograd.Function):
    """Identity whose backward turns a sparse incoming gradient into a dense one (for Adam)."""

    @staticmethod
    def forward(ctx, tensor: Tensor) -> Tensor:  # type: ignore[override]
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad.to_dense() if grad.is_sparse else grad
