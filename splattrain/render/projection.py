"""Projection and tile binning of 3D Gaussians, as gsplat's CUDA kernels do them, in PyTorch.

* projection as gsplat's fused kernel (EWA splatting with a clamped Jacobian, ``eps2d`` blur,
  optional antialiasing compensation, opacity-aware bounding radii);
* tile binning with gsplat's ``isect_ids`` / ``flatten_ids`` / ``isect_offsets`` layout, and the
  ``info`` dict gsplat's ``rasterization`` returns.

:mod:`splattrain.render.torch_rasterizer` composites what these produce; the compiled CPU
backend reuses :class:`Projection`, :class:`TileIntersections` and :func:`gsplat_info`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import RASTERIZE_MODES

ALPHA_THRESHOLD = 1.0 / 255.0
"""Gaussians whose alpha at a pixel is below this are skipped there (gsplat's ALPHA_THRESHOLD)."""
RADIUS_EXTENT = 3.33
"""Bounding radius of a projected Gaussian in standard deviations (before the opacity bound)."""
@dataclass
class Projection:
    """Gaussians projected into C cameras (gsplat's non-packed layout).

    Attributes:
        radii: int32 [C, N, 2] bounding radii in pixels; 0 where culled.
        means2d: [C, N, 2] projected centres in pixels.
        depths: [C, N] camera-space z.
        conics: [C, N, 3] upper triangle (a, b, c) of the inverse 2D covariance.
        opacities: [C, N] opacities, times the antialiasing compensation when enabled.
    """

    radii: Tensor
    means2d: Tensor
    depths: Tensor
    conics: Tensor
    opacities: Tensor


def _quat_scale_to_matrix(quats: Tensor, scales: Tensor) -> Tensor:
    """R(q) @ diag(s) for wxyz quaternions (normalised here) and scales: [N, 3, 3]."""
    w, x, y, z = F.normalize(quats, dim=-1).unbind(-1)
    rot = torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).reshape(quats.shape[:-1] + (3, 3))
    return rot * scales[..., None, :]


def project(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    eps2d: float = 0.3,
    antialiased: bool = False,
) -> Projection:
    """Project 3D Gaussians into pinhole cameras like gsplat's ``fully_fused_projection``.

    Differentiable w.r.t. means, quats, scales and opacities. Radii use gsplat's opacity-aware
    bound ``min(3.33, sqrt(2 log(255 opacity)))`` standard deviations, so Gaussians with opacity
    below 1/255 are culled, like those behind the near plane, beyond the far plane or off-screen.
    """
    rot, trans = viewmats[:, :3, :3], viewmats[:, :3, 3]
    means_c = torch.einsum("cij,nj->cni", rot, means) + trans[:, None, :]  # [C, N, 3]
    depths = means_c[..., 2]
    in_depth = (depths > near_plane) & (depths < far_plane)
    z = torch.where(in_depth, depths, torch.ones_like(depths))  # keeps culled Gaussians finite
    cov_xx, cov_xy, cov_yy = _covariance_2d(means_c, z, quats, scales, rot, Ks, width, height)

    det_orig = cov_xx * cov_yy - cov_xy * cov_xy
    cov_xx, cov_yy = cov_xx + eps2d, cov_yy + eps2d
    det_raw = cov_xx * cov_yy - cov_xy * cov_xy
    det = det_raw.clamp(min=1e-10)
    conics = torch.stack([cov_yy / det, -cov_xy / det, cov_xx / det], dim=-1)

    means2d = torch.einsum("cij,cnj->cni", Ks[:, :2, :3], means_c) / z[..., None]
    opacities = opacities.expand_as(z)
    if antialiased:
        opacities = opacities * torch.sqrt(torch.clamp(det_orig / det, min=0.0))

    radii = _radii(
        means2d.detach(), cov_xx.detach(), cov_yy.detach(), opacities.detach(), width, height
    )
    radii *= (in_depth & (det_raw.detach() > 0))[..., None]
    return Projection(radii, means2d, depths, conics, opacities)


def project_for_rasterizer(
    project_fn: Callable[..., Projection],
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    near_plane: float,
    far_plane: float,
    eps2d: float,
    rasterize_mode: str,
) -> Tuple[Projection, Tensor]:
    """The entry of a ``rasterize``: check ``rasterize_mode``, project with ``project_fn`` (this
    module's :func:`project` or the C++ one) and give every camera its ``colors`` ([C, N, D])."""
    if rasterize_mode not in RASTERIZE_MODES:
        raise ValueError(f"rasterize_mode must be 'classic' or 'antialiased', not {rasterize_mode!r}")
    proj = project_fn(
        means, quats, scales, opacities, viewmats, Ks, width, height,
        near_plane=near_plane, far_plane=far_plane, eps2d=eps2d, antialiased=rasterize_mode == "antialiased",
    )
    if colors.dim() == 2:
        colors = colors.expand(viewmats.shape[0], -1, -1)
    return proj, colors


def _covariance_2d(
    means_c: Tensor, z: Tensor, quats: Tensor, scales: Tensor, rot: Tensor, Ks: Tensor,
    width: int, height: int,
) -> Tuple[Tensor, Tensor, Tensor]:
    """EWA-projected 2D covariance entries xx, xy, yy ([C, N] each) before the eps2d blur.

    As gsplat, the Jacobian is evaluated at the centre clamped to 1.3x the field of view.
    """
    x, y = means_c[..., 0], means_c[..., 1]
    fx, fy = Ks[:, 0, 0, None], Ks[:, 1, 1, None]
    cx, cy = Ks[:, 0, 2, None], Ks[:, 1, 2, None]
    lim_x = 0.3 * 0.5 * width / fx
    lim_y = 0.3 * 0.5 * height / fy
    tx = z * torch.clamp(x / z, min=-(cx / fx + lim_x), max=(width - cx) / fx + lim_x)
    ty = z * torch.clamp(y / z, min=-(cy / fy + lim_y), max=(height - cy) / fy + lim_y)

    # Rows of J @ R_cam @ R_q @ S, with J = [[fx/z, 0, -fx tx/z^2], [0, fy/z, -fy ty/z^2]].
    cam_m = torch.einsum("cij,njk->cnik", rot, _quat_scale_to_matrix(quats, scales))
    jm_x = (fx / z)[..., None] * (cam_m[..., 0, :] - (tx / z)[..., None] * cam_m[..., 2, :])
    jm_y = (fy / z)[..., None] * (cam_m[..., 1, :] - (ty / z)[..., None] * cam_m[..., 2, :])
    return (jm_x * jm_x).sum(-1), (jm_x * jm_y).sum(-1), (jm_y * jm_y).sum(-1)


def _radii(
    means2d: Tensor, cov_xx: Tensor, cov_yy: Tensor, opacities: Tensor, width: int, height: int
) -> Tensor:
    """Opacity-aware bounding radii (int32 [C, N, 2]), 0 for faint or off-screen Gaussians."""
    extent = torch.sqrt(2.0 * torch.log(opacities.clamp(min=ALPHA_THRESHOLD) / ALPHA_THRESHOLD))
    extent = extent.clamp(max=RADIUS_EXTENT)
    radius = torch.ceil(extent[..., None] * torch.stack([cov_xx, cov_yy], dim=-1).sqrt())
    size = torch.tensor([width, height], dtype=radius.dtype, device=radius.device)
    keep = (
        (opacities >= ALPHA_THRESHOLD)
        & (radius > 0).all(-1)
        & (means2d + radius > 0).all(-1)
        & (means2d - radius < size).all(-1)
    )
    return (radius * keep[..., None]).int()


@dataclass
class TileIntersections:
    """Gaussian-tile intersections in gsplat's layout (``isect_tiles`` + ``isect_offset_encode``).

    Attributes:
        tile_size, tile_width, tile_height: tile edge in pixels and tile grid size.
        tiles_per_gauss: int32 [C, N] number of tiles each Gaussian touches.
        isect_ids: int64 [M] keys ``camera << (tile_bits + 32) | tile << 32 | depth bits``, sorted.
        flatten_ids: int32 [M] flat index ``camera * N + gaussian`` of each intersection.
        isect_offsets: int32 [C, tile_height, tile_width] start of each tile's run in the lists.
    """

    tile_size: int
    tile_width: int
    tile_height: int
    tiles_per_gauss: Tensor
    isect_ids: Tensor
    flatten_ids: Tensor
    isect_offsets: Tensor


@torch.no_grad()
def intersect_tiles(
    means2d: Tensor, radii: Tensor, depths: Tensor, width: int, height: int, tile_size: int
) -> TileIntersections:
    """Bin projected Gaussians into tiles and sort each tile's list front to back."""
    n_cams, n_gauss = depths.shape
    device = means2d.device
    tile_width = math.ceil(width / tile_size)
    tile_height = math.ceil(height / tile_size)
    grid = torch.tensor([tile_width, tile_height], device=device)

    rad = radii.to(means2d.dtype)
    tile_min = torch.floor((means2d - rad) / tile_size).long().clamp(min=0).minimum(grid)
    tile_max = torch.ceil((means2d + rad) / tile_size).long().clamp(min=0).minimum(grid)
    span = tile_max - tile_min  # [C, N, 2]
    tiles_per_gauss = span.prod(-1) * (radii > 0).all(-1)

    counts = tiles_per_gauss.flatten()
    flat = torch.repeat_interleave(torch.arange(counts.numel(), device=device), counts)
    rank = torch.arange(flat.numel(), device=device) - (torch.cumsum(counts, 0) - counts)[flat]
    span_x = span[..., 0].flatten()[flat]
    tile_x = tile_min[..., 0].flatten()[flat] + rank % span_x
    tile_y = tile_min[..., 1].flatten()[flat] + rank // span_x
    cam = flat // n_gauss

    tiles_per_image = tile_width * tile_height
    tile = tile_y * tile_width + tile_x
    depth_bits = depths.float().contiguous().view(torch.int32).flatten()[flat].long() & 0xFFFFFFFF
    keys = ((cam << tiles_per_image.bit_length() | tile) << 32) | depth_bits
    isect_ids, order = torch.sort(keys, stable=True)
    flatten_ids = flat[order].int()

    tile_counts = torch.bincount(cam * tiles_per_image + tile, minlength=n_cams * tiles_per_image)
    offsets = (torch.cumsum(tile_counts, 0) - tile_counts).int()
    return TileIntersections(
        tile_size,
        tile_width,
        tile_height,
        tiles_per_gauss.int(),
        isect_ids,
        flatten_ids,
        offsets.reshape(n_cams, tile_height, tile_width),
    )


def gsplat_info(proj: Projection, isects: TileIntersections, width: int, height: int, tile_size: int) -> Dict[str, Any]:
    """The ``info`` dict gsplat's ``rasterization`` returns (unpacked), which its strategies read."""
    return {
        "batch_ids": None,
        "camera_ids": None,
        "gaussian_ids": None,
        "radii": proj.radii,
        "means2d": proj.means2d,
        "depths": proj.depths,
        "conics": proj.conics,
        "opacities": proj.opacities,
        "tile_width": isects.tile_width,
        "tile_height": isects.tile_height,
        "tiles_per_gauss": isects.tiles_per_gauss,
        "isect_ids": isects.isect_ids,
        "flatten_ids": isects.flatten_ids,
        "isect_offsets": isects.isect_offsets,
        "width": width,
        "height": height,
        "tile_size": tile_size,
        "n_batches": 1,
        "n_cameras": proj.means2d.shape[0],
    }
