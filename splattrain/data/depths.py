"""Per-view depth maps attached to a scene's training frames: read from ``depths/<view>.npy`` beside
it, or made from the sparse points each photo observed (``data.depths: sparse``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image

from ..cameras import Camera
from ..errors import DataError
from .types import SceneData


def depth_folder(root: Path, setting: str) -> Optional[Path]:
    """The depth folder for ``data.depths``: none or sparse -> None; auto -> ``root/depths`` if
    present; else that folder."""
    if setting in ("none", "sparse"):
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


def attach_sparse_depths(scene: SceneData) -> int:
    """Give every training frame whose photo observed sparse points (``scene.observed``, the
    structure-from-motion tracks) the depth map of those points; returns how many frames got one.
    DataError when the scene has no tracks."""
    if scene.points is None or not scene.observed:
        raise DataError(
            "data.depths=sparse: the scene has no sparse points with tracks (the views each point was "
            "seen in); use a COLMAP model whose points3D keep their tracks, or data.depths=auto"
        )
    found = 0
    points = scene.points.astype(np.float64)
    for frame in scene.train:
        indices = scene.observed.get(frame.name)
        if indices is not None and len(indices):
            frame.depth = sparse_depth(points[indices], frame.camera)
            found += 1
    return found


def sparse_depth(points: np.ndarray, camera: Camera) -> np.ndarray:
    """float32 [H, W]: the camera-z depth of each of ``points`` [P, 3] in front of ``camera`` at the
    pixel it projects to (the nearest where several do), 0 at every other pixel."""
    viewmat = camera.viewmat.double().cpu().numpy()
    K = camera.K.double().cpu().numpy()
    cam = points @ viewmat[:3, :3].T + viewmat[:3, 3]
    cam = cam[cam[:, 2] > 1e-6]
    u = np.floor(K[0, 0] * cam[:, 0] / cam[:, 2] + K[0, 2]).astype(np.int64)
    v = np.floor(K[1, 1] * cam[:, 1] / cam[:, 2] + K[1, 2]).astype(np.int64)
    inside = (u >= 0) & (u < camera.width) & (v >= 0) & (v < camera.height)
    return _nearest_wins(u[inside], v[inside], cam[inside, 2], (camera.width, camera.height))


def shrink_depth(depth: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``depth`` [H, W] at ``size`` (width, height): each known pixel (> 0) lands on the pixel that
    covers it, the nearest depth where several do; sparse maps keep their points."""
    v, u = np.nonzero(depth > 0)
    height, width = depth.shape
    column = np.minimum((u + 0.5) * size[0] / width, size[0] - 1).astype(np.int64)
    row = np.minimum((v + 0.5) * size[1] / height, size[1] - 1).astype(np.int64)
    return _nearest_wins(column, row, depth[v, u].astype(np.float64), size)


def _nearest_wins(u: np.ndarray, v: np.ndarray, z: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float32 [height, width] map of depths ``z`` at pixels (``u``, ``v``), the smallest where
    several share one, 0 elsewhere."""
    depth = np.zeros((size[1], size[0]), dtype=np.float32)
    order = np.argsort(-z, kind="stable")  # the far first: the near ones are written last
    depth[v[order], u[order]] = z[order]
    return depth
