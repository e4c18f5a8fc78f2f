"""Depth and colour rendered from a trained scene's cameras, ready to fuse, and the extent of what
those cameras see."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Sequence

import numpy as np
import torch

from ..cameras import Camera
from ..errors import UserError
from ..io.png import to_uint8
from ..model.gaussians import GaussianModel
from ..render.base import Renderer

DEPTH_MODES = ("median", "expected")
#: Pixels less covered than this carry no depth (the background shows through them).
MIN_ALPHA = 0.5


@dataclass
class DepthView:
    """One camera's render: ``rgb`` uint8 [H, W, 3], ``depth`` float32 [H, W] (0 where the splat
    covers less than MIN_ALPHA of the pixel), its ``camera``."""

    rgb: np.ndarray
    depth: np.ndarray
    camera: Camera


def check_depth_mode(mode: str) -> str:
    """``mode`` when it is one of DEPTH_MODES; UserError otherwise."""
    if mode not in DEPTH_MODES:
        raise UserError(f"--depth {mode!r}: use one of {', '.join(DEPTH_MODES)}")
    return mode


@torch.no_grad()
def render_depth_views(renderer: Renderer, model: GaussianModel, cameras: Sequence[Camera], sh_degree: int,
                       background: torch.Tensor, mode: str = "median") -> Iterator[DepthView]:
    """Render every camera's colour and ``mode`` depth (median or expected), one at a time."""
    check_depth_mode(mode)
    device = model.means.device
    for camera in cameras:
        result = renderer.render(model, [camera.to(device)], sh_degree, background, depth=mode)
        depth = result.median_depth if mode == "median" else result.depth
        if depth is None:
            raise UserError(f"renderer {type(renderer).__name__} rendered no {mode} depth; use another renderer"
                            + (" or --depth expected" if mode == "median" else ""))
        covered = result.alpha[0, ..., 0] >= MIN_ALPHA
        depth = torch.where(covered & torch.isfinite(depth[0, ..., 0]), depth[0, ..., 0], 0.0).clamp_min(0.0)
        yield DepthView(to_uint8(result.rgb[0]), depth.float().cpu().numpy(), camera)


def unproject(depth: np.ndarray, camera: Camera) -> np.ndarray:
    """World points [M, 3] (float64) of the pixels of ``depth`` [H, W] with a depth > 0."""
    rows, cols = np.nonzero(depth > 0)
    z = depth[rows, cols].astype(np.float64)
    K = camera.K.double().cpu().numpy()
    x = (cols + 0.5 - K[0, 2]) / K[0, 0] * z
    y = (rows + 0.5 - K[1, 2]) / K[1, 1] * z
    viewmat = camera.viewmat.double().cpu().numpy()
    cam = np.stack([x, y, z], axis=1)
    return (cam - viewmat[:3, 3]) @ viewmat[:3, :3]


def survey_views(renderer: Renderer, model: GaussianModel, cameras: Sequence[Camera], sh_degree: int,
                 background: torch.Tensor, scale: float = 0.25) -> List[DepthView]:
    """Every camera's median depth (and colour) rendered at ``scale`` of its resolution: what the
    extent seen and the memory a fusion takes are measured on, before the views are fused."""
    small: List[Camera] = [c.scaled(scale) for c in cameras]
    return list(render_depth_views(renderer, model, small, sh_degree, background, "median"))


def surface_points(views: Sequence[DepthView], max_depth: float = np.inf) -> np.ndarray:
    """The world points [M, 3] (float64) of the pixels of ``views`` with a depth up to ``max_depth``."""
    points = [unproject(np.where(v.depth <= max_depth, v.depth, 0.0), v.camera) for v in views]
    return np.concatenate(points) if points else np.zeros((0, 3))


def seen_extent(points: np.ndarray) -> float:
    """The diagonal of the box holding the central 98% (per axis) of the surface ``points``; 0 when
    there are fewer than two."""
    if len(points) < 2:
        return 0.0
    low, high = np.percentile(points, [1.0, 99.0], axis=0)
    return float(np.linalg.norm(high - low))
