"""Viewer images: a render in one of the modes rgb / depth / alpha, as uint8 HxWx3."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..io.depth_maps import colorize_depth
from ..io.png import to_uint8
from ..render.base import RenderResult

RENDER_MODES = ("rgb", "depth", "alpha")

#: A pixel changed visibly when one of its channels moved by more than this many levels (of 255).
VISIBLE_LEVELS = 8
#: An image changed visibly when more than this share of its pixels did.
VISIBLE_SHARE = 0.005

def view_image(result: RenderResult, mode: str) -> np.ndarray:
    """The first camera of ``result`` in ``mode`` as uint8 [H, W, 3]."""
    if mode not in RENDER_MODES:
        raise ValueError(f"render mode {mode!r}: use one of {', '.join(RENDER_MODES)}")
    if mode == "rgb":
        return to_uint8(result.rgb[0])
    alpha = result.alpha[0, ..., 0]
    if mode == "alpha":
        return to_uint8(alpha)[..., None].repeat(3, axis=2)
    if result.depth is None:
        raise ValueError("the render has no depth")
    return colorize_depth(result.depth[0, ..., 0].detach().cpu().numpy(), alpha.detach().cpu().numpy())


def visibly_changed(before: Optional[np.ndarray], after: np.ndarray) -> bool:
    """Whether uint8 image ``after`` differs visibly from ``before`` (None or another size: True):
    more than VISIBLE_SHARE of its pixels moved by more than VISIBLE_LEVELS in some channel."""
    if before is None or before.shape != after.shape:
        return True
    moved = np.abs(after.astype(np.int16) - before.astype(np.int16)).max(axis=-1) > VISIBLE_LEVELS
    return int(np.count_nonzero(moved)) > VISIBLE_SHARE * moved.size


def thumbnail(image: np.ndarray, background: Sequence[float] = (1.0, 1.0, 1.0), long_side: int = 64) -> np.ndarray:
    """A small RGB copy of a uint8 RGB(A) image (RGBA over ``background``) for camera frustums."""
    from PIL import Image

    if image.shape[2] == 4:
        alpha = image[..., 3:4].astype(np.float32) / 255.0
        colour = np.asarray(background, dtype=np.float32) * 255.0
        image = (image[..., :3] * alpha + colour * (1.0 - alpha) + 0.5).astype(np.uint8)
    h, w = image.shape[:2]
    scale = long_side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(np.ascontiguousarray(image[..., :3])).resize(size, Image.BILINEAR))
