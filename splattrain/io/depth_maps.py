"""Depth maps as files: 16-bit PNG (with the scale that turns levels back into depth), float32
``.npy`` and a coloured preview PNG."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Dict

import numpy as np
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from .atomic import atomic_path
from .png import PNG_COMPRESS_LEVEL, save_png

#: The PNG text key holding the depth of one 16-bit level, in the scene's units.
SCALE_KEY = "depth_scale"
#: Pixels less covered than this get depth 0 in the files (nothing there).
MIN_ALPHA = 0.5
LEVELS = 65535

# Control points of a perceptually ordered blue -> green -> yellow ramp (viridis' ends and middle).
_RAMP = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float32)


def colorize_depth(depth: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Depth [H, W] as colours, near blue to far yellow, scaled to the covered pixels'
    2nd..98th percentile; pixels with alpha < 0.05 are black."""
    covered = alpha > 0.05
    out = np.zeros(depth.shape + (3,), dtype=np.uint8)
    if not covered.any():
        return out
    near, far = np.percentile(depth[covered], [2.0, 98.0])
    t = np.clip((depth - near) / max(far - near, 1e-8), 0.0, 1.0) * (len(_RAMP) - 1)
    low = np.floor(t).astype(np.int64).clip(0, len(_RAMP) - 2)
    frac = (t - low)[..., None]
    colours = _RAMP[low] * (1.0 - frac) + _RAMP[low + 1] * frac
    out[covered] = colours[covered].round().astype(np.uint8)
    return out


def depth_png_bytes(depth: np.ndarray) -> tuple[bytes, float]:
    """``depth`` [H, W] (0: none) as a 16-bit grayscale PNG whose level k means depth k * scale,
    the largest depth at level 65535; returns (the file's bytes, scale). The scale is also in
    the PNG's ``depth_scale`` text chunk."""
    depth = np.where(np.isfinite(depth) & (depth > 0), depth, 0.0).astype(np.float64)
    top = float(depth.max()) if depth.size else 0.0
    scale = top / LEVELS if top > 0 else 1.0
    levels = np.round(depth / scale).clip(0, LEVELS).astype(np.uint16)
    info = PngInfo()
    info.add_text(SCALE_KEY, repr(scale))
    buffer = io.BytesIO()
    Image.fromarray(levels).save(buffer, format="PNG", pnginfo=info, compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue(), scale


def read_depth_png(path: str | Path) -> np.ndarray:
    """A depth map written by :func:`save_depth_maps`, as float32 [H, W] in the scene's units."""
    with Image.open(path) as image:
        scale = float(image.text[SCALE_KEY])
        return np.asarray(image, dtype=np.float64).astype(np.float32) * np.float32(scale)


def save_depth_maps(folder: Path, name: str, depth: np.ndarray, alpha: np.ndarray) -> Dict[str, object]:
    """Write ``depth`` [H, W] (pixels with ``alpha`` < 0.5 as 0) to ``folder`` as ``<name>.png``
    (16 bits), ``<name>.npy`` (float32) and ``<name>_preview.png`` (coloured); returns the
    scale of the PNG's levels."""
    depth = np.where(alpha >= MIN_ALPHA, depth, 0.0).astype(np.float32)
    data, scale = depth_png_bytes(depth)
    with atomic_path(folder / f"{name}.png") as tmp:
        tmp.write_bytes(data)
    buffer = io.BytesIO()
    np.save(buffer, depth, allow_pickle=False)
    with atomic_path(folder / f"{name}.npy") as tmp:
        tmp.write_bytes(buffer.getvalue())
    save_png(folder / f"{name}_preview.png", colorize_depth(depth, np.where(alpha >= MIN_ALPHA, alpha, 0.0)))
    return {"png": f"{name}.png", "npy": f"{name}.npy", "scale": scale}
