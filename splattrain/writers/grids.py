"""Validation image grids: render | ground truth | error heat map | depth, as one uint8 image."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..io.png import to_uint8

# Google's polynomial approximation of the Turbo colormap (red, green, blue; powers 0..5).
_TURBO = np.array(
    [
        [0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943],
        [0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604],
        [0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973],
    ]
)


def turbo(x: np.ndarray) -> np.ndarray:
    """Turbo colours [..., 3] in [0, 1] for values ``x`` in [0, 1] (blue -> green -> red)."""
    x = np.clip(x, 0.0, 1.0)[..., None]
    powers = x ** np.arange(6)
    return np.clip(powers @ _TURBO.T, 0.0, 1.0)


def hot(x: np.ndarray) -> np.ndarray:
    """'hot' colours [..., 3] in [0, 1] for ``x`` in [0, 1] (black -> red -> yellow -> white)."""
    x = np.clip(x, 0.0, 1.0)[..., None]
    return np.clip(3.0 * x - np.array([0.0, 1.0, 2.0]), 0.0, 1.0)


def error_map(render: np.ndarray, target: np.ndarray, scale: float = 0.2) -> np.ndarray:
    """Heat map [H, W, 3] of the mean absolute error per pixel; ``scale`` or more is white."""
    error = np.abs(np.clip(render, 0.0, 1.0) - target).mean(axis=-1)
    return hot(error / scale)


def depth_map(depth: np.ndarray, alpha: Optional[np.ndarray] = None) -> np.ndarray:
    """Depth [H, W, 1] in Turbo colours, near red and far blue, normalised per image.

    The range spans pixels that are mostly covered (alpha > 0.5); uncovered pixels fade to black.
    """
    depth = depth[..., 0]
    weight = np.ones_like(depth) if alpha is None else np.clip(alpha[..., 0], 0.0, 1.0)
    valid = np.isfinite(depth) & (weight > 0.5)
    if not valid.any():
        return np.zeros(depth.shape + (3,), dtype=np.float64)
    near, far = float(depth[valid].min()), float(depth[valid].max())
    closeness = (far - np.nan_to_num(depth, nan=far)) / max(far - near, 1e-8)
    # Turbo's dark ends are skipped so that uncovered (black) pixels stand apart.
    return turbo(0.05 + 0.85 * closeness) * weight[..., None]


def validation_grid(
    render: np.ndarray,
    target: np.ndarray,
    depth: Optional[np.ndarray] = None,
    alpha: Optional[np.ndarray] = None,
    error_scale: float = 0.2,
) -> np.ndarray:
    """[H, 3W or 4W, 3] uint8: render | ground truth | error heat map [| depth when given].

    ``render`` and ``target`` are [H, W, 3] floats in [0, 1]; ``depth`` and ``alpha`` [H, W, 1].
    """
    panels = [np.clip(render, 0.0, 1.0), target, error_map(render, target, error_scale)]
    if depth is not None:
        panels.append(depth_map(depth, alpha))
    grid = np.concatenate(panels, axis=1)
    return to_uint8(grid)
