"""Reader for nerfstudio's ``transforms.json`` (one file; shared or per-frame intrinsics and distortion)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import numpy as np

from ..config.schema import DataConfig
from ..errors import DataError
from ..io.ply import read_ply_vertices
from ..registry import DATASETS
from .distortion import Distortion
from .images import image_size, worker_count
from .locate import folders_below
from .reader import DatasetReader, SceneFolder
from .split import frame_names, held_out
from .transforms_json import check_unique, frame_file, frame_list, number, read_json, viewmat_from_gl
from .types import SceneData
from .views import ViewSpec, load_views, mask_file, mask_folder, shrunk_folder

_PERSPECTIVE = ("PINHOLE", "SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV")
_INTRINSIC_KEYS = ("fl_x", "fl_y", "cx", "cy", "w", "h", "k1", "k2", "k3", "k4", "p1", "p2", "camera_model")


def load_nerfstudio(path: str | Path, cfg: Optional[DataConfig] = None) -> SceneData:
    """Load ``transforms.json`` in ``path``: frames sorted by file name, split by ``cfg.test_every`` /
    ``cfg.test_images``, undistorted, with masks (``mask_path`` or ``cfg.masks``) and the points of
    ``ply_file_path`` when given. Raises DataError naming the file and frame for unusable input."""
    cfg = cfg or DataConfig(path=str(path))
    root = Path(path)
    json_path = root / "transforms.json"
    meta = read_json(json_path)
    raw_frames = frame_list(meta, json_path)
    masks, per_frame_masks = _mask_source(root, cfg.masks, raw_frames, json_path)
    notes = [f"nerfstudio: {len(raw_frames)} frames from {json_path}"]
    if masks is not None or per_frame_masks:
        notes.append(f"nerfstudio: masks from {masks or 'mask_path'}")
    paths = [frame_file(json_path, raw, index) for index, raw in enumerate(raw_frames)]
    check_unique(paths, json_path)
    order = sorted(range(len(paths)), key=lambda i: paths[i].as_posix())
    files = [paths[i].relative_to(root).as_posix() if paths[i].is_relative_to(root) else paths[i].name for i in order]
    specs = [
        _view(json_path, meta, raw_frames[i], i, paths[i], name, cfg.downscale, masks, per_frame_masks)
        for i, name in zip(order, frame_names(files))
    ]
    if any(spec.shrink != 1.0 for spec in specs):
        notes.append(f"nerfstudio: reading images_{cfg.downscale:g}/ folders for data.downscale={cfg.downscale:g}")
    is_test = held_out(files, cfg.test_every, list(cfg.test_images), str(json_path))
    frames = load_views(specs, cfg.downscale, worker_count(cfg.num_workers),
                         cfg.image_budget_mb)
    points, colors = _points(json_path, meta)
    if points is None:
        notes.append("nerfstudio: no sparse points (ply_file_path); model.init auto starts from random points")
    return SceneData(
        train=[f for f, test in zip(frames, is_test) if not test],
        test=[f for f, test in zip(frames, is_test) if test],
        points=points,
        point_colors=colors,
        source=str(root),
        extra={"notes": notes},
    )


def _mask_source(
    root: Path, setting: str, raw_frames: list[dict[str, Any]], json_path: Path
) -> tuple[Optional[Path], bool]:
    """(mask folder or None, whether frames name their own ``mask_path``) for ``data.masks``."""
    with_mask = [i for i, raw in enumerate(raw_frames) if "mask_path" in raw]
    if setting != "auto" or not with_mask:
        return mask_folder(root, setting), False
    if len(with_mask) != len(raw_frames):
        missing = next(i for i in range(len(raw_frames)) if i not in set(with_mask))
        raise DataError(
            f"{json_path}: frame {missing} has no mask_path but {len(with_mask)} other frames do; "
            "give every frame a mask or set data.masks=none"
        )
    return None, True


def _view(
    json_path: Path,
    meta: dict[str, Any],
    raw: dict[str, Any],
    index: int,
    file: Path,
    name: str,
    downscale: float,
    masks: Optional[Path],
    per_frame_masks: bool,
) -> ViewSpec:
    """One frame's view; per-frame intrinsics override the top-level ones."""
    where = f"frame {index} of {json_path}"
    cam = {key: raw[key] if key in raw else meta[key] for key in _INTRINSIC_KEYS if key in raw or key in meta}
    folder, shrink = shrunk_folder(file.parent, downscale)
    if "w" in cam and "h" in cam:
        frame = f"frame {index}: "
        size = (int(number(cam, "w", json_path, frame)), int(number(cam, "h", json_path, frame)))
        size_source = f"w/h in {json_path.name}"
    else:
        size = image_size(file, where)
        size_source = f"the size of {file.name}"
    K, distortion = _intrinsics(cam, size, json_path, index)
    if per_frame_masks:
        mask_path: Optional[Path] = frame_file(json_path, raw, index, key="mask_path")
    else:
        mask_path = mask_file(masks, file.name) if masks is not None else None
    return ViewSpec(
        name=name,
        path=folder / file.name,
        viewmat=viewmat_from_gl(raw, json_path, index),
        K=K,
        size=size,
        where=where,
        size_source=size_source,
        shrink=shrink,
        distortion=distortion,
        mask_path=mask_path,
    )


def _intrinsics(
    cam: dict[str, Any], size: tuple[int, int], json_path: Path, index: int
) -> tuple[np.ndarray, Distortion]:
    where = f"frame {index}: "
    model = cam.get("camera_model", "OPENCV")
    if model not in _PERSPECTIVE and model != "OPENCV_FISHEYE":
        raise DataError(
            f"{json_path}: {where}camera_model {model!r} is not supported (use {', '.join(_PERSPECTIVE)} "
            "or OPENCV_FISHEYE); convert the capture to a perspective camera"
        )
    if "fl_x" not in cam:
        raise DataError(f"{json_path}: {where}missing key 'fl_x' (top level or per frame)")
    fx = number(cam, "fl_x", json_path, where)
    fy = number(cam, "fl_y", json_path, where) if "fl_y" in cam else fx
    cx = number(cam, "cx", json_path, where) if "cx" in cam else size[0] / 2
    cy = number(cam, "cy", json_path, where) if "cy" in cam else size[1] / 2
    k = tuple(number(cam, key, json_path, where) if key in cam else 0.0 for key in ("k1", "k2", "k3", "k4"))
    p = tuple(number(cam, key, json_path, where) if key in cam else 0.0 for key in ("p1", "p2"))
    if model == "OPENCV_FISHEYE":
        distortion = Distortion(radial=k, fisheye=True)
    else:
        distortion = Distortion(radial=k, tangential=(p[0], p[1]))
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]), distortion


def _points(json_path: Path, meta: dict[str, Any]) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Points [P,3] float32 and colours [P,3] uint8 of ``ply_file_path``, or (None, None)."""
    if "ply_file_path" not in meta:
        return None, None
    ply = json_path.parent / str(meta["ply_file_path"])
    vertices = read_ply_vertices(ply)
    names = set(vertices.dtype.names or ())
    if not {"x", "y", "z"} <= names:
        raise DataError(
            f"{ply}: the vertices have no x, y, z; point ply_file_path in {json_path.name} at a point cloud"
        )
    xyz = np.stack([vertices[c] for c in ("x", "y", "z")], axis=1).astype(np.float32)
    if not np.isfinite(xyz).all():
        raise DataError(f"{ply}: some points have non-finite coordinates; clean the point cloud")
    if {"red", "green", "blue"} <= names:
        rgb = np.stack([vertices[c] for c in ("red", "green", "blue")], axis=1).astype(np.uint8)
    else:
        rgb = np.full((len(xyz), 3), 128, dtype=np.uint8)
    return (xyz, rgb) if len(xyz) else (None, None)


@DATASETS.register("nerfstudio")
class NerfstudioReader(DatasetReader):
    """nerfstudio folders (one transforms.json; per-frame or shared intrinsics, distortion, masks)."""

    normalize_by_default = True
    detect_hint = "nerfstudio transforms.json"

    @classmethod
    def detect(cls, path: Path) -> bool:
        return (path / "transforms.json").is_file()

    @classmethod
    def scenes_below(cls, root: Path) -> List[SceneFolder]:
        """A folder holding transforms.json one level below ``root``."""
        return [SceneFolder(folder, f"nerfstudio {folder / 'transforms.json'}", {})
                for folder in folders_below(root) if folder.parent == root and cls.detect(folder)]

    def load(self, path: str, cfg: DataConfig) -> SceneData:
        return load_nerfstudio(path, cfg)
