"""From view descriptions (file, pose, intrinsics, distortion, mask) to frames, decoded in parallel."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..cameras import Camera
from ..errors import DataError
from ..io.limits import require_memory
from .depths import shrink_depth
from .distortion import Distortion, Undistorter
from .images import image_budget_bytes, parallel_map, read_image, read_mask, resize_image, resize_mask, scaled_size
from .types import Frame


@dataclass
class ViewSpec:
    """One view as a reader found it, before its image is decoded.

    Attributes:
        name: the frame's name (unique in the scene).
        path: the image file to decode.
        viewmat: OpenCV world-to-camera [4, 4].
        K: intrinsics [3, 3] for an image of ``size``.
        size: (width, height) that ``K`` refers to.
        where: what defines the view, for messages ("image 'a.jpg' (id 3) in .../images.bin").
        size_source: what defines ``size``, for messages ("camera 1 in .../cameras.bin").
        shrink: the file is ``size`` shrunk by this factor (an ``images_N`` folder), else 1.
        distortion: the lens distortion of ``K``'s camera; images are undistorted to ``K``.
        mask_path: an optional mask file (non-zero = pixel counts).
    """

    name: str
    path: Path
    viewmat: np.ndarray
    K: np.ndarray
    size: tuple[int, int]
    where: str
    size_source: str
    shrink: float = 1.0
    distortion: Distortion = Distortion()
    mask_path: Optional[Path] = None


class _UndistorterCache:
    """One :class:`Undistorter` per (intrinsics, distortion, size), shared by the decoding threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple, Undistorter] = {}

    def get(self, K: np.ndarray, distortion: Distortion, size: tuple[int, int]) -> Undistorter:
        key = (tuple(np.round(K.ravel(), 9)), distortion, size)
        with self._lock:
            if key not in self._items:
                self._items[key] = Undistorter(K, distortion, *size)
            return self._items[key]


def load_views(specs: Sequence[ViewSpec], downscale: float, workers: int,
               budget_mb: Optional[float] = None) -> list[Frame]:
    """Decode every view on ``workers`` threads into frames shrunk by ``downscale`` and undistorted;
    refuses (one line, with the estimate) views whose decoded images cannot fit in memory.

    The images are kept (uint8) while their sizes add up to at most ``budget_mb``
    (``data.image_budget_mb``; None: a quarter of the machine's memory); each later view is
    decoded once here (so a bad file stops the load, not the run) and then only when it is used
    (:meth:`Frame.pixels`). The memory needed counts the images kept when ``budget_mb`` is set,
    every image when it is None (decoding most views on use is slow: a user asks for it).
    """
    kept = _views_within(specs, downscale, image_budget_bytes(budget_mb))
    _require_image_memory(specs, downscale, workers, kept if budget_mb is not None else len(specs), budget_mb)
    cache = _UndistorterCache()

    def load(index: int) -> Frame:
        frame = _load_view(specs[index], downscale, cache)
        if index >= kept:
            frame.image = None
            frame.reload = functools.partial(_reload_image, specs[index], downscale, cache)
        return frame

    return parallel_map(load, range(len(specs)), workers)


def _require_image_memory(specs: Sequence[ViewSpec], downscale: float, workers: int, kept: int,
                          budget_mb: Optional[float]) -> None:
    """Refuse views whose images cannot fit in memory: those held (the first ``kept``, 4 bytes a
    pixel at most) and each decoding thread's work on the largest image (the file, its resized
    and undistorted copies), which also covers a batch of views decoded again on use."""
    sizes = [scaled_size(*spec.size, downscale) for spec in specs]
    if not sizes:
        return
    width, height = max(sizes, key=lambda size: size[0] * size[1])
    held = sum(w * h for w, h in sizes[:kept]) * 4
    what = f"data.downscale={downscale:g}: {len(sizes)} images of up to {width}x{height} pixels"
    what += (f" ({kept} kept in memory by data.image_budget_mb={budget_mb:g})" if budget_mb is not None
             else " (all kept in memory: data.image_budget_mb keeps fewer and decodes the rest when used)")
    require_memory(what, held + width * height * 4 * 3 * max(1, workers))


def _views_within(specs: Sequence[ViewSpec], downscale: float, budget_bytes: Optional[int]) -> int:
    """How many of the first views' RGB images fit in ``budget_bytes`` (all of them: None)."""
    if budget_bytes is None:
        return len(specs)
    total = 0
    for index, spec in enumerate(specs):
        width, height = scaled_size(*spec.size, downscale) if spec.shrink == 1.0 else \
            (round(spec.size[0] / spec.shrink), round(spec.size[1] / spec.shrink))
        total += width * height * 3
        if total > budget_bytes:
            return index
    return len(specs)


def _reload_image(spec: ViewSpec, downscale: float, cache: _UndistorterCache) -> np.ndarray:
    image = _load_view(spec, downscale, cache).image
    assert image is not None
    return image


def _file_size_ok(actual: tuple[int, int], size: tuple[int, int], shrink: float) -> bool:
    """Whether a file of ``actual`` size can be ``size`` shrunk by ``shrink`` (any rounding)."""
    if shrink == 1.0:
        return actual == size
    return all(abs(a - s / shrink) < 1.0 for a, s in zip(actual, size))


def _load_view(spec: ViewSpec, downscale: float, cache: _UndistorterCache) -> Frame:
    image = read_image(spec.path, spec.where)
    height, width = image.shape[:2]
    if not _file_size_ok((width, height), spec.size, spec.shrink):
        W, H = spec.size
        if spec.shrink == 1.0:
            raise DataError(
                f"{spec.path}: image is {width}x{height} but {spec.size_source} is {W}x{H} ({spec.where}); "
                "every image of one camera must have its size: resize the file or give it a camera of its own"
            )
        raise DataError(
            f"{spec.path}: image is {width}x{height} but {spec.size_source} is {W}x{H}, so "
            f"{spec.path.parent.name}/ should hold about {W / spec.shrink:.0f}x{H / spec.shrink:.0f} "
            f"({spec.where}); regenerate {spec.path.parent.name}/ or choose another data.downscale"
        )
    target = (width, height) if spec.shrink != 1.0 else scaled_size(*spec.size, downscale)
    if target != (width, height):
        image = resize_image(image, target)
    K = spec.K.astype(np.float64).copy()
    K[0] *= target[0] / spec.size[0]
    K[1] *= target[1] / spec.size[1]
    mask = _load_mask(spec.mask_path, spec, (width, height), target) if spec.mask_path is not None else None
    if not spec.distortion.is_identity:
        undistorter = cache.get(K, spec.distortion, target)
        image = undistorter.image(image)
        mask = undistorter.mask(mask) if mask is not None else undistorter.valid
    if mask is not None and mask.all():
        mask = None
    camera = Camera(
        viewmat=torch.from_numpy(spec.viewmat.astype(np.float32)),
        K=torch.from_numpy(K.astype(np.float32)),
        width=target[0],
        height=target[1],
        name=spec.name,
    )
    return Frame(image=image, camera=camera, name=spec.name, mask=mask)


def _load_mask(path: Path, spec: ViewSpec, file_size: tuple[int, int], target: tuple[int, int]) -> np.ndarray:
    """The mask at ``path`` at ``target`` size; it must match the image file's size or ``spec.size``."""
    mask = read_mask(path, spec.where)
    size = (mask.shape[1], mask.shape[0])
    if size not in (file_size, spec.size):
        raise DataError(
            f"{path}: mask is {size[0]}x{size[1]} but its image {spec.path.name} is "
            f"{file_size[0]}x{file_size[1]} ({spec.where}); masks must have their image's size"
        )
    return resize_mask(mask, target) if size != target else mask


def shrunk_folder(folder: Path, downscale: float) -> tuple[Path, float]:
    """``folder``_N and N when ``downscale`` is the integer N > 1 and that folder exists, else (folder, 1)."""
    if downscale > 1 and float(downscale).is_integer():
        shrunk = folder.with_name(f"{folder.name}_{int(downscale)}")
        if shrunk.is_dir():
            return shrunk, float(downscale)
    return folder, 1.0


def mask_folder(root: Path, setting: str) -> Optional[Path]:
    """The mask folder for ``data.masks``: none -> None; auto -> ``root/masks`` if present; else that folder."""
    if setting == "none":
        return None
    if setting == "auto":
        return root / "masks" if (root / "masks").is_dir() else None
    folder = root / setting
    if not folder.is_dir():
        raise DataError(f"data.masks: folder '{folder}' not found; set data.masks to auto, none or a mask folder")
    return folder


def mask_file(folder: Path, image_name: str) -> Path:
    """The mask of ``image_name`` in ``folder``: ``<name>.png`` (COLMAP's convention), ``<name>``, or
    ``<name without extension>.png``, whichever exists (the first when none does)."""
    candidates = [folder / f"{image_name}.png", folder / image_name, (folder / image_name).with_suffix(".png")]
    return next((c for c in candidates if c.is_file()), candidates[0])


def downscaled_frame(frame: Frame, factor: float) -> Frame:
    """``frame`` shrunk by ``factor`` (1 = unchanged), intrinsics scaled to the new size."""
    if factor == 1:
        return frame
    width, height = frame.camera.width, frame.camera.height
    size = scaled_size(width, height, factor)
    K = frame.camera.K.clone()
    K[0] *= size[0] / width
    K[1] *= size[1] / height
    camera = Camera(viewmat=frame.camera.viewmat, K=K, width=size[0], height=size[1], name=frame.camera.name)
    mask = None if frame.mask is None else resize_mask(frame.mask, size)
    depth = None if frame.depth is None else shrink_depth(frame.depth, size)
    return Frame(image=resize_image(frame.pixels(), size), camera=camera, name=frame.name, mask=mask, depth=depth)
