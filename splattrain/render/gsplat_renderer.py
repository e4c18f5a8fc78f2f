"""gsplat's CUDA rasterizer (``renderer.type: gsplat``), through its public ``rasterization``."""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from ..cameras import Camera, stack_cameras
from ..model.gaussians import GaussianModel
from ..registry import RENDERERS
from .base import Renderer, RenderResult


@RENDERERS.register("gsplat", aliases=("GsplatRenderer",))
class GsplatRenderer(Renderer):
    """gsplat's CUDA rasterizer (needs a CUDA device).

    Besides the common options: ``packed`` (gsplat's memory-saving packed mode: per-visible
    Gaussian intermediates instead of [C, N] ones) and ``sparse_grad`` (gsplat's projection returns
    sparse gradients for rotations and scales; needs ``packed``). splattrain's Adam optimizers take
    dense gradients, so those are made dense where they leave gsplat: ``sparse_grad`` trains exactly
    like ``packed`` alone and saves no memory of its own.
    """

    supports_absgrad = True
    supports_pose_grad = True

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
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: bool = True
    ) -> RenderResult:
        from gsplat import rasterization

        viewmats, Ks, width, height = stack_cameras(cameras)
        C = viewmats.shape[0]
        means, quats, scales = model.means, model.quats, model.scales
        if self.sparse_grad:
            means, quats, scales = (DenseGrad.apply(t) for t in (means, quats, scales))
        render, alpha, info = rasterization(
            means, quats, scales, model.opacities, model.sh_coeffs, viewmats, Ks, width, height,
            near_plane=self.near_plane, far_plane=self.far_plane, eps2d=self.eps2d, tile_size=self.tile_size,
            sh_degree=sh_degree, backgrounds=background.expand(C, 3), render_mode="RGB+ED" if depth else "RGB",
            rasterize_mode=self.rasterize_mode, packed=self.packed, sparse_grad=self.sparse_grad,
            absgrad=self.absgrad,
        )
        return RenderResult(rgb=render[..., :3], alpha=alpha, depth=render[..., 3:] if depth else None, info=info)


class DenseGrad(torch.autograd.Function):
    """Identity whose backward turns a sparse incoming gradient into a dense one (for Adam)."""

    @staticmethod
    def forward(ctx, tensor: Tensor) -> Tensor:  # type: ignore[override]
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad.to_dense() if grad.is_sparse else grad
