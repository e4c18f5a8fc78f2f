"""Per-view depth maps (``depths/<view>.npy`` beside a scene), attached to its frames."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image

from ..errors import DataError
from .types import SceneData


def depth_folder(root: Path, setting: str) -> Optional[Path]:
    """The depth folder for ``data.depths``: none -> None; auto -> ``root/depths`` if present; else that folder."""
    if setting == "none":
        return None
    if setting == "auto":
        return root / "depths" if (root / "depths").is_dir() else None
    folder = Path(setting)
    if not folder.is_dir():
        raise DataError(f"data.depths: folder '{folder}' not found; set data.depths to auto, none or a folder of .npy files")
    return folder


def read_depth(path: Path, size: tuple[int, int]) -> np.ndarray:
    """The depth map at ``path`` (a 2-D float .npy, 0 or less where unknown) at ``size`` (width, height)."""
    try:
        depth = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not a readable depth map ({err})") from None
    if depth.ndim == 3 and depth.shape[-1] == 1:
        depth = depth[..., 0]
    if depth.ndim != 2 or not np.issubdtype(depth.dtype, np.number):
        raise DataError(f"{path}: a depth map must be a 2-D array of numbers, got shape {depth.shape} {depth.dtype}")
    depth = np.nan_to_num(depth.astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    if (depth.shape[1], depth.shape[0]) != size:
        depth = np.asarray(Image.fromarray(depth).resize(size, Image.Resampling.NEAREST))
    return depth


def attach_depths(scene: SceneData, folder: Path, scale: float = 1.0) -> int:
    """Give every frame with a ``<folder>/<name>.npy`` its depth map, times ``scale`` (the scene's
    normalisation); returns how many frames got one."""
    found = 0
    for frame in scene.train + scene.test:
        path = folder / f"{frame.name}.npy"
        if path.is_file():
            frame.depth = read_depth(path, (frame.camera.width, frame.camera.height)) * np.float32(scale)
            found += 1
    if found == 0:
        raise DataError(f"data.depths: no <view>.npy in '{folder}' matches a view name (e.g. {scene.train[0].name}.npy)")
    return found
