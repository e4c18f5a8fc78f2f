"""Geometry regularisers in the sense of 2D Gaussian Splatting (Huang et al., SIGGRAPH 2024): depth
distortion gathers each pixel's weights at one depth, depth-normal consistency aligns the
Gaussians' normals with the surface their depth map describes. Both are off by default; add them
to ``loss.terms`` (docs/mesh.md gives their cost per step and effect).

Both read images the renderer composites in the same pass as the colours (``normals``,
``distortion``: see :mod:`splattrain.render.outputs`), so they run with every built-in backend.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError
from ..registry import LOSSES
from .terms import Batch, LossTerm


def _renderer_lacks(term: LossTerm, trainer: Any) -> Optional[str]:
    """Why ``trainer``'s renderer cannot feed ``term`` (None: it can)."""
    renderer = trainer.renderer
    missing = sorted(term.needs_outputs - getattr(renderer, "supported_extras", frozenset()))
    if missing:
        return f"renderer {type(renderer).__name__} does not render {', '.join(missing)}"
    return None


def _valid_mean(values: Tensor, valid: Tensor, batch: Batch) -> Tensor:
    """Mean of ``values`` [C, H, W, 1] over ``valid`` pixels (and the batch's mask, if any)."""
    mask = batch.get("mask")
    if mask is not None:
        valid = valid & mask
    return (values * valid).sum() / valid.sum().clamp_min(1)


class _GeometryTerm(LossTerm):
    """A regulariser that reads the renderer's extra images and starts at ``start_step`` (as 2DGS
    starts its own once the geometry has formed; before it the term is 0 and costs nothing but
    the extra channels)."""

    def __init__(self, weight: float = 1.0, start_step: int = 0) -> None:
        super().__init__(weight)
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ConfigError(f"loss term {type(self).__name__}: start_step must be a whole number >= 0, "
                              f"got {start_step!r}")
        self.start_step = start_step

    def unavailable(self, trainer: Any) -> Optional[str]:
        return _renderer_lacks(self, trainer)

    def waiting(self, render, batch: Batch) -> Optional[Tensor]:
        """A zero loss while the batch's step is before ``start_step``, else None."""
        step = batch.get("step")
        if step is not None and step < self.start_step:
            return render.alpha.new_zeros(())
        return None


def depth_normals(depth: Tensor, Ks: Tensor) -> Tuple[Tensor, Tensor]:
    """Unit normals [C, H, W, 3] (camera frame, facing the camera) of the surface a depth map
    [C, H, W, 1] describes, from central differences of its back-projected points, and where they
    exist (bool [C, H, W, 1]: not on the image border)."""
    C, H, W, _ = depth.shape
    u = torch.arange(W, device=depth.device, dtype=depth.dtype) + 0.5
    v = torch.arange(H, device=depth.device, dtype=depth.dtype) + 0.5
    fx, fy, cx, cy = (Ks[:, i, j].to(depth.dtype)[:, None, None] for i, j in ((0, 0), (1, 1), (0, 2), (1, 2)))
    z = depth[..., 0]
    points = torch.stack([(u[None, None, :] - cx) / fx * z, (v[None, :, None] - cy) / fy * z, z], dim=-1)
    along_x = points[:, 1:-1, 2:] - points[:, 1:-1, :-2]
    along_y = points[:, 2:, 1:-1] - points[:, :-2, 1:-1]
    normals = F.normalize(torch.linalg.cross(along_y, along_x, dim=-1), dim=-1)  # y x x faces the camera
    normals = F.pad(normals, (0, 0, 1, 1, 1, 1))
    valid = torch.zeros(C, H, W, 1, dtype=torch.bool, device=depth.device)
    valid[:, 1:-1, 1:-1] = True
    return normals, valid


@LOSSES.register("depth_distortion")
class DepthDistortionLoss(_GeometryTerm):
    """Depth distortion (2DGS): how far each pixel's compositing weights spread along the ray.

    Per pixel, the weighted variance of the composited Gaussians' depths,
    ``sum_ij w_i w_j (z_i - z_j)^2 / (2 A^2)`` (``A = sum_i w_i``, the pixel's alpha), relative to
    the squared expected depth, then weighted by the pixel's alpha (no gradient through that
    weight) and averaged over pixels.

    2DGS sums ``w_i w_j |z_i - z_j|`` over the pairs. Squared distances are used here because
    their sum is exact from three composited sums (``sum w``, ``sum w z``, ``sum w z^2``), which
    every backend renders and differentiates in the same pass as the colours; and the spread is
    normalised by ``A^2`` and the depth so that it is lowered only by gathering the weights at one
    depth, never by making Gaussians transparent (unnormalised, the term empties the scene early in
    training, when the weights of freshly placed Gaussians are spread widely) and does not depend
    on the scene's scale."""

    needs_depth = True
    needs_outputs = frozenset({"distortion"})

    def __call__(self, render, batch, model) -> Tensor:
        waiting = self.waiting(render, batch)
        if waiting is not None:
            return waiting
        alpha = render.alpha.clamp_min(1e-4)
        covered = render.alpha.detach() > 0.01
        variance = render.distortion / alpha.square()  # of the depth under the weights w / A
        relative = variance / render.depth.detach().square().clamp_min(1e-12)
        return _valid_mean(alpha.detach() * relative, covered, batch)


@LOSSES.register("normal_consistency")
class NormalConsistencyLoss(_GeometryTerm):
    """Depth-normal consistency (2DGS): per pixel ``sum_i w_i (1 - n_i . N)``, with ``n_i`` the
    Gaussians' normals (the axis of their smallest scale, facing the camera) and ``N`` the normal
    of the rendered expected-depth map; the mean over pixels off the image border. As the sum
    equals ``alpha - (sum_i w_i n_i) . N``, it needs only the composited normals; gradients
    reach both the Gaussians' orientations and the depth map."""

    needs_depth = True
    needs_outputs = frozenset({"normals"})

    def __call__(self, render, batch, model) -> Tensor:
        waiting = self.waiting(render, batch)
        if waiting is not None:
            return waiting
        Ks = torch.stack([camera.K for camera in batch["camera"]]).to(render.depth.device)
        surface, valid = depth_normals(render.depth, Ks)
        error = render.alpha - (render.normals * surface).sum(-1, keepdim=True)
        return _valid_mean(error, valid, batch)
