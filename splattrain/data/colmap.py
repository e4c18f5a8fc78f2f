"""Reader for COLMAP scenes: ``images/`` plus a sparse model in ``sparse/0/`` (or ``sparse/``), found
also below a project root (``dense/0``, ``sparse/N``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import numpy as np

from ..config.schema import DataConfig
from ..errors import DataError
from ..registry import DATASETS
from .colmap_model import ColmapCamera, ColmapModel, model_files, read_model
from .distortion import Distortion
from .images import worker_count
from .locate import folders_below
from .reader import DatasetReader, SceneFolder
from .split import frame_names, held_out
from .types import SceneData
from .views import ViewSpec, load_views, mask_file, mask_folder, shrunk_folder

#: Camera models splattrain reads (distorted ones are undistorted at load).
SUPPORTED_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE")
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


def find_sparse(root: Path) -> Optional[Path]:
    """The folder holding the COLMAP model under ``root``: ``sparse/0`` or ``sparse``, or None."""
    for sparse in (root / "sparse" / "0", root / "sparse"):
        if model_files(sparse) is not None:
            return sparse
    return None


def camera_intrinsics(camera: ColmapCamera, cameras_file: Path) -> tuple[np.ndarray, Distortion]:
    """(K [3,3] for the camera's full size, distortion) of a COLMAP camera; DataError if unsupported."""
    p = camera.params
    if camera.model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        fx = fy = p[0]
        cx, cy = p[1], p[2]
        distortion = Distortion(radial=tuple(p[3:]))
    elif camera.model in ("PINHOLE", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE"):
        fx, fy, cx, cy = p[:4]
        if camera.model == "OPENCV":
            distortion = Distortion(radial=p[4:6], tangential=(p[6], p[7]))
        elif camera.model == "FULL_OPENCV":
            distortion = Distortion(radial=(p[4], p[5], p[8]), rational=p[9:12], tangential=(p[6], p[7]))
        elif camera.model == "OPENCV_FISHEYE":
            distortion = Distortion(radial=p[4:8], fisheye=True)
        else:
            distortion = Distortion()
    else:
        raise DataError(
            f"{cameras_file}: camera {camera.id} uses the {camera.model} model, which splattrain cannot undistort "
            f"(it reads {', '.join(SUPPORTED_MODELS)}); undistort the images first with "
            "'colmap image_undistorter' and point data.path at its output"
        )
    if fx <= 0 or fy <= 0:
        raise DataError(f"{cameras_file}: camera {camera.id} has a non-positive focal length ({fx}, {fy})")
    K = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    return K, distortion


def load_colmap(path: str | Path, cfg: Optional[DataConfig] = None, model: Optional[str] = None) -> SceneData:
    """Load a COLMAP scene: registered images (undistorted), poses, intrinsics and coloured sparse points.

    Uses ``images_N/`` when ``cfg.downscale`` is N and it exists, holds out test views by
    ``cfg.test_every`` / ``cfg.test_images`` and reads masks per ``cfg.masks``. ``model`` is the
    sparse model folder relative to ``path`` when not ``sparse/0`` or ``sparse``. Raises DataError naming the file (and image or camera) for any unusable input.
    """
    cfg = cfg or DataConfig(path=str(path))
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: dataset folder not found")
    sparse = find_sparse(root) if model is None else root / model
    if model is not None and model_files(sparse) is None:
        raise DataError(f"{sparse}: data.options.model names no COLMAP model (no cameras.bin or cameras.txt)")
    if sparse is None:
        raise DataError(
            f"{root}: no COLMAP model; expected sparse/0/ or sparse/ holding cameras, images and points3D "
            "(.bin or .txt)"
        )
    model = read_model(sparse)
    image_dir = root / "images"
    if not image_dir.is_dir():
        raise DataError(f"{image_dir}: folder not found; a COLMAP scene keeps its photos in images/ next to sparse/")
    folder, shrink = shrunk_folder(image_dir, cfg.downscale)
    masks = mask_folder(root, cfg.masks)
    notes = [f"colmap: {len(model.images)} images, {len(model.points)} points from {sparse}"]
    if shrink != 1.0:
        notes.append(f"colmap: reading {folder.name}/ for data.downscale={cfg.downscale:g}")
    if masks is not None:
        notes.append(f"colmap: masks from {masks}")
    notes += _unregistered_note(image_dir, model)

    images = sorted(model.images, key=lambda image: image.name)
    intrinsics = {
        cid: camera_intrinsics(model.cameras[cid], model.cameras_file) for cid in {i.camera_id for i in images}
    }
    specs, observed, seen = [], {}, model.observed_points()
    for name, image in zip(frame_names([i.name for i in images]), images):
        if image.id in seen:
            observed[name] = seen[image.id]
        camera = model.cameras[image.camera_id]
        K, distortion = intrinsics[image.camera_id]
        specs.append(
            ViewSpec(
                name=name,
                path=folder / image.name,
                viewmat=image.viewmat(),
                K=K,
                size=(camera.width, camera.height),
                where=f"image '{image.name}' (id {image.id}) in {model.images_file}",
                size_source=f"camera {camera.id} in {model.cameras_file}",
                shrink=shrink,
                distortion=distortion,
                mask_path=mask_file(masks, image.name) if masks is not None else None,
            )
        )
    is_test = held_out([i.name for i in images], cfg.test_every, list(cfg.test_images), str(model.images_file))
    frames = load_views(specs, cfg.downscale, worker_count(cfg.num_workers),
                         cfg.image_budget_mb)
    has_points = len(model.points) > 0
    if not has_points:
        notes.append(f"colmap: {model.points_file or sparse} has no points; model.init auto starts from random points")
    return SceneData(
        train=[f for f, test in zip(frames, is_test) if not test],
        test=[f for f, test in zip(frames, is_test) if test],
        points=model.points.astype(np.float32) if has_points else None,
        point_colors=model.colors if has_points else None,
        source=str(root),
        extra={"notes": notes},
        observed=observed if has_points else {},
    )


def _unregistered_note(image_dir: Path, model: ColmapModel) -> list[str]:
    """A note about image files that the model does not use (COLMAP could not register them)."""
    registered = {image.name for image in model.images}
    files = [p for p in image_dir.rglob("*") if p.suffix.lower() in _IMAGE_SUFFIXES and p.is_file()]
    unused = [p for p in files if p.relative_to(image_dir).as_posix() not in registered]
    if not unused:
        return []
    return [
        f"colmap: {len(unused)} of {len(files)} files in {image_dir} are not in {model.images_file.name} "
        f"(not registered by COLMAP) and are not used, e.g. {unused[0].name}"
    ]


def colmap_models(folder: Path) -> List[Path]:
    """The sparse models of a COLMAP folder: ``sparse/`` itself, else each ``sparse/N``."""
    sparse = folder / "sparse"
    if model_files(sparse) is not None:
        return [sparse]
    if not sparse.is_dir():
        return []
    return sorted(p for p in sparse.iterdir() if p.is_dir() and model_files(p) is not None)


@DATASETS.register("colmap")
class ColmapReader(DatasetReader):
    """COLMAP scenes (images/ plus sparse/0/ or sparse/, binary or text; images_N/ for downscales).

    ``model`` picks one of several sparse models (e.g. ``sparse/1``), relative to the scene folder.
    """

    normalize_by_default = True
    detect_hint = "colmap sparse/0/ with cameras.bin or cameras.txt"
    searched_when_detected = True

    def __init__(self, model: Optional[str] = None) -> None:
        self.model = model

    @classmethod
    def detect(cls, path: Path) -> bool:
        return find_sparse(path) is not None

    @classmethod
    def scenes_below(cls, root: Path) -> List[SceneFolder]:
        """Every folder in or below ``root`` holding ``images/`` with a sparse model beside it
        (one entry per model; ``model`` names one that is not ``sparse/0``)."""
        found = []
        for folder in folders_below(root):
            if (folder / "images").is_dir():
                for model in colmap_models(folder):
                    pick = {} if model.name in ("sparse", "0") else {"model": model.relative_to(folder).as_posix()}
                    found.append(SceneFolder(folder, f"colmap model {model}", pick))
        return found

    def load(self, path: str, cfg: DataConfig) -> SceneData:
        return load_colmap(path, cfg, model=self.model)
