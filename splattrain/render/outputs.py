"""What a render returns besides colour: expected and median depth, rendered normals and depth
distortion, all composited as extra channels of the same pass as the colours.

Channel layout after the 3 colours: depth ``z`` (when any depth output or the distortion is
wanted), ``(z - r)^2`` (distortion; ``r`` a per-camera reference depth that keeps the sums
small), then the camera-frame normal (3 channels). The backends composite these like colours,
so every output is differentiable wherever the colours are (median depth is not: it is an
index choice, taken from the forward pass only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

DEPTH_CHOICES = ("expected", "median", "both")
"""What ``Renderer.render(depth=...)`` takes besides True (expected) and False (none)."""
EXTRA_OUTPUTS = ("normals", "distortion")
"""Outputs a renderer adds to every render when its ``extra_outputs`` names them."""

DepthArg = Union[bool, str]


@dataclass(frozen=True)
class Wanted:
    """The outputs one render call produces."""

    expected: bool = False
    median: bool = False
    normals: bool = False
    distortion: bool = False

    @classmethod
    def of(cls, depth: DepthArg, extras: Iterable[str] = ()) -> "Wanted":
        """From ``render``'s ``depth`` argument (True / False / 'expected' / 'median' / 'both') and
        the renderer's ``extra_outputs``; ValueError for anything else."""
        if depth is True or depth is False:
            expected, median = bool(depth), False
        elif depth in DEPTH_CHOICES:
            expected, median = depth in ("expected", "both"), depth in ("median", "both")
        else:
            raise ValueError(f"render depth={depth!r}: use True, False or one of {', '.join(DEPTH_CHOICES)}")
        extras = frozenset(extras)
        unknown = sorted(extras - set(EXTRA_OUTPUTS))
        if unknown:
            raise ValueError(f"unknown render output {unknown[0]!r}: use {', '.join(EXTRA_OUTPUTS)}")
        return cls(expected, median, "normals" in extras, "distortion" in extras)

    @property
    def depth_channel(self) -> bool:
        """Whether the per-Gaussian depth is composited (channel 3)."""
        return self.expected or self.median or self.distortion

    @property
    def channels(self) -> int:
        """Channels composited after the 3 colours."""
        return int(self.depth_channel) + int(self.distortion) + 3 * int(self.normals)


def check_extra_outputs(extras: Iterable[str], supported: FrozenSet[str], name: str) -> FrozenSet[str]:
    """``extras`` as a frozenset, ValueError naming the first one renderer ``name`` cannot give."""
    extras = frozenset(extras)
    missing = sorted(extras - supported)
    if missing:
        raise ValueError(f"renderer {name!r} cannot render {missing[0]!r} (it renders: "
                         f"{', '.join(sorted(supported)) or 'no extra outputs'})")
    return extras


def camera_depths(means: Tensor, viewmats: Tensor) -> Tensor:
    """Camera-space z of every mean in every camera: [C, N]."""
    return torch.einsum("cj,nj->cn", viewmats[:, 2, :3], means) + viewmats[:, 2, 3:4]


def gaussian_normals(means: Tensor, quats: Tensor, scales: Tensor, viewmats: Tensor) -> Tensor:
    """Each Gaussian's normal in each camera's frame, [C, N, 3]: the axis of its smallest scale,
    turned to face the camera (the flat Gaussians a surface is made of are discs across it)."""
    w, x, y, z = F.normalize(quats, dim=-1).unbind(-1)
    rot = torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], dim=-1).reshape(-1, 3, 3)
    axis = scales.detach().argmin(dim=-1)
    normals = rot.gather(2, axis[:, None, None].expand(-1, 3, 1))[..., 0]  # [N, 3], the chosen column
    cam_normals = torch.einsum("cij,nj->cni", viewmats[:, :3, :3], normals)
    cam_means = torch.einsum("cij,nj->cni", viewmats[:, :3, :3], means) + viewmats[:, None, :3, 3]
    facing = (cam_normals * cam_means).sum(-1, keepdim=True).detach() > 0
    return torch.where(facing, -cam_normals, cam_normals)


def extra_features(wanted: Wanted, means: Tensor, quats: Tensor, scales: Tensor, viewmats: Tensor,
                   depths: Optional[Tensor] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """The channels to composite after the colours, [C, N, wanted.channels] (None when none), and
    the per-camera reference depth of the distortion channel [C] (None without it). ``depths``
    [C, N] are the camera-space depths when the backend has them already."""
    if not wanted.channels:
        return None, None
    if depths is None:
        depths = camera_depths(means, viewmats)
    parts, reference = [], None
    if wanted.depth_channel:
        parts.append(depths[..., None])
    if wanted.distortion:
        with torch.no_grad():
            ahead = depths > 0
            reference = (depths * ahead).sum(1) / ahead.sum(1).clamp_min(1)
        parts.append((depths - reference[:, None]).square()[..., None])
    if wanted.normals:
        parts.append(gaussian_normals(means, quats, scales, viewmats))
    return torch.cat(parts, dim=-1), reference


def result_fields(wanted: Wanted, render: Tensor, alpha: Tensor, reference: Optional[Tensor],
                  median: Optional[Tensor] = None) -> Dict[str, Any]:
    """``RenderResult`` keyword arguments from a composite of [rgb, extra channels] ``render``
    [C, H, W, 3 + wanted.channels] (the extra channels over a zero background) and ``median`` depth."""
    fields: Dict[str, Any] = {"rgb": render[..., :3], "alpha": alpha}
    column = 3
    if wanted.depth_channel:
        accumulated = render[..., column:column + 1]
        if wanted.expected:
            fields["depth"] = accumulated / alpha.clamp_min(1e-10)
        column += 1
    if wanted.median:
        fields["median_depth"] = median
    if wanted.distortion:
        # sum_ij w_i w_j (z_i - z_j)^2 / 2 = A sum w (z - r)^2 - (sum w (z - r))^2 for any r
        spread = accumulated - alpha * reference[:, None, None, None]
        fields["distortion"] = (alpha * render[..., column:column + 1] - spread.square()).clamp_min(0.0)
        column += 1
    if wanted.normals:
        fields["normals"] = render[..., column:column + 3]
    return fields
