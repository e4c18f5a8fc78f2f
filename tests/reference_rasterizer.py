"""Brute-force dense Gaussian rasterizer, the test oracle for ``splattrain.render.torch_rasterizer``.

Every pixel is tested against every Gaussian, in one global front-to-back order per camera, with
plain autograd for gradients. Projection reuses gsplat's own PyTorch helpers; the compositing
rules are gsplat's CUDA kernel rules, written out independently of the tiled implementation.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from gsplat.cuda._torch_impl import _fully_fused_projection, _quat_scale_to_covar_preci
from torch import Tensor

ALPHA_THRESHOLD = 1.0 / 255.0
ALPHA_MAX = 0.999
TRANSMITTANCE_MIN = 1e-4


def project_reference(
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
) -> dict:
    """gsplat's PyTorch projection: radii, means2d, depths, conics and (compensated) opacities."""
    covars, _ = _quat_scale_to_covar_preci(quats, scales, compute_preci=False)
    radii, means2d, depths, conics, compensations = _fully_fused_projection(
        means, covars, viewmats, Ks, width, height, eps2d, near_plane, far_plane,
        calc_compensations=antialiased,
    )
    opacities = opacities.expand_as(depths)
    if compensations is not None:
        opacities = opacities * compensations
    return dict(radii=radii, means2d=means2d, depths=depths, conics=conics, opacities=opacities)


def pixel_weights(
    means2d: Tensor, conics: Tensor, opacities: Tensor, depths: Tensor, visible: Tensor, cam: int, width: int,
    height: int,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Camera ``cam``'s visible Gaussians in front-to-back order (ids [M]), and per pixel their
    alphas (0 where skipped or past the end) and the transmittance in front of each ([P, M] each,
    P = H * W); the compositing weights are their product."""
    rows = torch.arange(height, dtype=means2d.dtype)
    cols = torch.arange(width, dtype=means2d.dtype)
    ys, xs = torch.meshgrid(rows, cols, indexing="ij")
    pixels = torch.stack([xs.flatten(), ys.flatten()], dim=-1) + 0.5  # [P, 2]
    ids = torch.nonzero(visible[cam]).flatten()
    ids = ids[torch.argsort(depths[cam, ids].detach(), stable=True)]
    dx, dy = (means2d[cam, ids][None, :, :] - pixels[:, None, :]).unbind(-1)  # [P, M] each
    a, b, c = conics[cam, ids].unbind(-1)
    sigma = 0.5 * (a * dx**2 + c * dy**2) + b * dx * dy
    alpha = torch.clamp(opacities[cam, ids] * torch.exp(-sigma), max=ALPHA_MAX)
    alpha = torch.where((sigma >= 0) & (alpha >= ALPHA_THRESHOLD), alpha, torch.zeros_like(alpha))
    # Sequential front-to-back loop semantics, vectorised: keep a Gaussian only while the
    # transmittance after it stays above the minimum.
    trans_after = torch.cumprod(1.0 - alpha, dim=-1)
    kept = (trans_after > TRANSMITTANCE_MIN).detach()
    alpha = alpha * kept
    ones = torch.ones_like(alpha[:, :1])
    trans_before = torch.cumprod(torch.cat([ones, 1.0 - alpha[:, :-1]], dim=1), dim=1)
    return ids, alpha, trans_before


def composite_reference(
    means2d: Tensor,
    conics: Tensor,
    opacities: Tensor,
    colors: Tensor,
    depths: Tensor,
    visible: Tensor,
    width: int,
    height: int,
    backgrounds: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Composite [C, N] projected Gaussians (only ``visible`` ones) into [C, H, W, D], [C, H, W, 1]."""
    renders, alphas = [], []
    for cam in range(means2d.shape[0]):
        ids, alpha, trans_before = pixel_weights(means2d, conics, opacities, depths, visible, cam, width, height)
        render = (alpha * trans_before) @ colors[cam, ids]
        trans_final = torch.prod(1.0 - alpha, dim=-1, keepdim=True)
        if backgrounds is not None:
            render = render + trans_final * backgrounds[cam]
        renders.append(render.reshape(height, width, -1))
        alphas.append((1.0 - trans_final).reshape(height, width, 1))
    return torch.stack(renders), torch.stack(alphas)


def median_depth_reference(proj: dict, width: int, height: int, near_plane: float = 0.01,
                           far_plane: float = 1e10) -> Tensor:
    """Per pixel [C, H, W, 1]: the depth of the last contributing Gaussian in front of which the
    transmittance is above 0.5; 0 where no Gaussian contributes."""
    visible = (proj["depths"] > near_plane) & (proj["depths"] < far_plane)
    medians = []
    for cam in range(proj["depths"].shape[0]):
        ids, alpha, trans_before = pixel_weights(proj["means2d"], proj["conics"], proj["opacities"], proj["depths"],
                                                 visible, cam, width, height)
        above = (alpha * trans_before > 0) & (trans_before > 0.5)
        rank = torch.arange(1, len(ids) + 1)
        last = (above * rank).amax(-1) if len(ids) else torch.zeros(width * height, dtype=torch.long)
        depth = proj["depths"][cam, ids][(last - 1).clamp_min(0)] if len(ids) else torch.zeros(width * height)
        medians.append(torch.where(last > 0, depth, torch.zeros_like(depth)).reshape(height, width, 1))
    return torch.stack(medians)


def rasterize_reference(
    means: Tensor,
    quats: Tensor,
    scales: Tensor,
    opacities: Tensor,
    colors: Tensor,
    viewmats: Tensor,
    Ks: Tensor,
    width: int,
    height: int,
    *,
    near_plane: float = 0.01,
    far_plane: float = 1e10,
    eps2d: float = 0.3,
    rasterize_mode: str = "classic",
    backgrounds: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, dict]:
    """Dense counterpart of ``torch_rasterizer.rasterize``; returns render, alphas, projection."""
    proj = project_reference(
        means, quats, scales, opacities, viewmats, Ks, width, height,
        near_plane=near_plane, far_plane=far_plane, eps2d=eps2d,
        antialiased=rasterize_mode == "antialiased",
    )
    if colors.dim() == 2:
        colors = colors.expand(viewmats.shape[0], -1, -1)
    # Depth culling only: the alpha >= 1/255 test already discards every Gaussian that gsplat
    # culls as off-screen or too faint, so those culls need not be repeated here.
    visible = (proj["depths"] > near_plane) & (proj["depths"] < far_plane)
    render, alphas = composite_reference(
        proj["means2d"], proj["conics"], proj["opacities"], colors, proj["depths"], visible,
        width, height, backgrounds,
    )
    return render, alphas, proj
