"""Camera-pose gradients for backends that differentiate only the Gaussians.

Rendering the Gaussians from a camera ``V`` equals rendering them moved rigidly by
``M = V0^-1 V`` from the camera ``V0``. With ``V0 = V.detach()`` the motion ``M`` is the identity
in value, so the moved Gaussians and the image are exactly those of the plain render, while the
gradient with respect to ``V`` flows through the Gaussians' means and rotations, which every
backend differentiates. The spherical-harmonics colours see the unmoved means shifted by the
camera centre's (zero-valued) displacement, so the viewing directions, and their gradient, are
those of the camera ``V`` too: the pose gradient is exact.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch
from torch import Tensor

from .base import RenderResult

#: ``info`` entries with one row per camera, concatenated when per-camera renders are merged.
PER_CAMERA_INFO = ("radii", "means2d", "depths", "conics", "opacities", "tiles_per_gauss")


def zero_motion(viewmat: Tensor) -> Tuple[Tensor, Tensor]:
    """``(rotation [3,3], translation [3])`` of ``M - I`` for ``M = V0^-1 viewmat``, ``V0 = viewmat.detach()``:
    both exactly zero in value, with the derivative of ``M`` with respect to ``viewmat``."""
    inverse = torch.linalg.inv(viewmat.detach())
    motion = inverse @ viewmat
    delta = motion - motion.detach()
    return delta[:3, :3], delta[:3, 3]


def moved_gaussians(means: Tensor, quats: Tensor, viewmat: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``means`` [N,3] and ``quats`` [N,4] (wxyz) moved by the zero-valued motion of ``viewmat``
    (see the module docstring), and the means to evaluate view-dependent colours at from
    ``viewmat.detach()`` (shifted by the camera centre's zero-valued displacement). All three
    equal their inputs in value and are differentiable in ``viewmat``."""
    rotation, translation = zero_motion(viewmat)
    moved_means = means + means @ rotation.T + translation
    # A rotation I + dR near the identity is the quaternion (1, w / 2) with w the axial vector of dR.
    half = 0.25 * torch.stack([rotation[2, 1] - rotation[1, 2], rotation[0, 2] - rotation[2, 0],
                               rotation[1, 0] - rotation[0, 1]])
    w, xyz = quats[:, :1], quats[:, 1:]
    # (1, h) * (w, v) = (w - h.v, v + w h + h x v); h is zero in value.
    moved_quats = torch.cat([w - xyz @ half[:, None], xyz + w * half + torch.linalg.cross(half.expand_as(xyz), xyz)],
                            dim=-1)
    centre = -viewmat[:3, :3].T @ viewmat[:3, 3]
    colour_means = means + (centre.detach() - centre)
    return moved_means, moved_quats, colour_means


def merge_results(results: List[RenderResult]) -> RenderResult:
    """One RenderResult for per-camera renders of the same size, in camera order. Per-camera
    ``info`` rows are concatenated; the tile-intersection lists (per render) are dropped."""
    if len(results) == 1:
        return results[0]
    first = results[0].info
    info: Dict[str, Any] = {key: value for key, value in first.items() if not isinstance(value, Tensor)}
    for key in ("isect_ids", "flatten_ids", "isect_offsets"):
        info[key] = None
    for key in PER_CAMERA_INFO:
        if isinstance(first.get(key), Tensor):
            info[key] = torch.cat([r.info[key] for r in results], dim=0)
    info["n_cameras"] = sum(int(r.info.get("n_cameras", 1)) for r in results)
    images = {name: torch.cat([getattr(r, name) for r in results], dim=0)
              for name in RenderResult.IMAGES if getattr(results[0], name) is not None}
    return RenderResult(rgb=torch.cat([r.rgb for r in results], dim=0),
                        alpha=torch.cat([r.alpha for r in results], dim=0), info=info, **images)
