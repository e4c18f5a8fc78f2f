"""The scene folder ``splattrain fit`` trains: ``images/``, ``sparse/0/`` and ``images_2/4/8/``.

Distortion: a camera whose lens model moves no pixel by more than
:data:`DISTORTION_TOLERANCE_PX` is written as its pinhole model with the same focal length
and centre (no resampling). Otherwise the registered images are undistorted once by COLMAP
to pinhole cameras cropped to valid pixels, so that ``images_N`` hold pinhole images, every
3DGS trainer reads the folder, and no masked corners are left for the loss.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, List, Tuple

import numpy as np

from ..data.images import resize_image, scaled_size
from . import require

#: Largest pixel displacement of the lens model that is dropped rather than resampled away.
DISTORTION_TOLERANCE_PX = 0.5
DOWNSCALES = (2, 4, 8)
#: Folders this stage writes (and replaces on a re-run) inside the output folder.
OUTPUTS = ("images", "sparse", *(f"images_{n}" for n in DOWNSCALES))
#: JPEG settings of the shrunk photos: quality 100 without chroma subsampling stays within about
#: 55 dB PSNR of the photo the reader would shrink at load (quality 95 with 4:2:0: 42 dB).
JPEG_SAVE = {"quality": 100, "subsampling": 0}
_PINHOLE = {"SIMPLE_PINHOLE": "SIMPLE_PINHOLE", "SIMPLE_RADIAL": "SIMPLE_PINHOLE", "RADIAL": "SIMPLE_PINHOLE",
            "PINHOLE": "PINHOLE", "OPENCV": "PINHOLE", "FULL_OPENCV": "PINHOLE"}


def distortion_px(camera: Any) -> float:
    """Largest displacement in pixels between the camera's lens model and its pinhole part,
    over the image border (where radial distortion is largest)."""
    w, h = camera.width, camera.height
    t = np.linspace(0.0, 1.0, 33)
    border = np.concatenate([np.stack([t * w, np.zeros_like(t)], 1), np.stack([t * w, np.full_like(t, h)], 1),
                             np.stack([np.zeros_like(t), t * h], 1), np.stack([np.full_like(t, w), t * h], 1)])
    normalised = np.asarray(camera.cam_from_img(border))
    pinhole = normalised * [camera.focal_length_x, camera.focal_length_y] + [camera.principal_point_x,
                                                                              camera.principal_point_y]
    return float(np.abs(pinhole - border).max())


def needs_undistortion(model: Any) -> Tuple[bool, float]:
    """(whether any camera moves a pixel by more than the tolerance, the largest displacement)."""
    worst = max(distortion_px(camera) for camera in model.cameras.values())
    return worst > DISTORTION_TOLERANCE_PX, worst


def _as_pinhole(model: Any) -> None:
    """Replace each camera of ``model`` by its pinhole part (same focal length and centre)."""
    pycolmap = require("pycolmap")
    for camera in model.cameras.values():
        name = _PINHOLE.get(camera.model.name, "PINHOLE")
        if name == "SIMPLE_PINHOLE":
            params = [camera.focal_length, camera.principal_point_x, camera.principal_point_y]
        else:
            params = [camera.focal_length_x, camera.focal_length_y, camera.principal_point_x, camera.principal_point_y]
        model.cameras[camera.camera_id] = pycolmap.Camera(model=name, width=camera.width, height=camera.height,
                                                         params=params, camera_id=camera.camera_id)


def staging_folder(work: Path) -> Path:
    """A new, empty folder in the work folder ``work`` where the scene is written before it
    replaces the output's (what an interrupted run left there is the work folder's own)."""
    staging = work / "scene"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    return staging


def write_scene(model: Any, model_dir: Path, image_dir: Path, out: Path, undistort: bool, work: Path,
                progress: Callable[[int], None]) -> List[str]:
    """``out/images`` and ``out/sparse/0`` (``out``: a new, empty staging folder) for the
    registered images of ``model`` (on disk in ``model_dir``, photos in ``image_dir``); returns
    the image names. ``progress`` counts images."""
    pycolmap = require("pycolmap")
    names = sorted(image.name for image in model.images.values() if image.has_pose)
    (out / "sparse" / "0").mkdir(parents=True)
    if undistort:
        staging = work / "undistorted"
        if staging.exists():
            shutil.rmtree(staging)
        pycolmap.undistort_images(staging, model_dir, image_dir, image_names=names)
        shutil.move(str(staging / "images"), str(out / "images"))
        pycolmap.Reconstruction(staging / "sparse").write_binary(out / "sparse" / "0")
        shutil.rmtree(staging)
        progress(len(names))
    else:
        _as_pinhole(model)
        model.write_binary(out / "sparse" / "0")
        for index, name in enumerate(names, start=1):
            target = out / "images" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(image_dir / name, target)
            progress(index)
    return names


def write_downscaled(out: Path, names: List[str], progress: Callable[[int], None]) -> None:
    """``images_2/4/8`` beside ``images``: each photo shrunk with the reader's own size rule and
    box filter, so ``data.downscale: N`` reads them as they are."""
    from PIL import Image

    for index, name in enumerate(names, start=1):
        source = out / "images" / name
        with Image.open(source) as image:
            rgb = np.asarray(image.convert("RGB"))
        for factor in DOWNSCALES:
            small = resize_image(rgb, scaled_size(rgb.shape[1], rgb.shape[0], factor))
            target = out / f"images_{factor}" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(small).save(target, **(JPEG_SAVE if target.suffix.lower() in (".jpg", ".jpeg") else {}))
        progress(index)
