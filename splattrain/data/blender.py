"""Reader for the NeRF-synthetic (Blender) layout: ``transforms_{split}.json`` plus images."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..config.schema import DataConfig
from ..errors import DataError
from ..registry import DATASETS
from .images import image_size, worker_count
from .reader import DatasetReader
from .transforms_json import check_unique, focal_from_angle, frame_file, frame_list, number, read_json, viewmat_from_gl
from .types import SceneData
from .views import ViewSpec, load_views, mask_file, mask_folder


def load_blender(path: str | Path, cfg: Optional[DataConfig] = None) -> SceneData:
    """Load ``transforms_train.json`` and ``transforms_{cfg.test_split}.json`` from ``path``.

    Falls back to ``transforms_val.json`` when the test file is missing (noted in
    ``extra["notes"]``). Images stay uint8 RGB or RGBA (shrunk by ``cfg.downscale``);
    ``points`` stays None. Raises DataError naming the offending file for any unusable input.
    """
    cfg = cfg or DataConfig(path=str(path))
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: dataset folder not found")
    notes: list[str] = []
    test_file = root / f"transforms_{cfg.test_split}.json"
    val_file = root / "transforms_val.json"
    if not test_file.is_file() and val_file.is_file():
        notes.append(f"{test_file.name} not found; using {val_file.name} as the test split")
        test_file = val_file
    if cfg.test_images:
        notes.append(f"data.test_images is ignored for blender scenes: the test views are those of {test_file.name}")
    masks = mask_folder(root, cfg.masks)
    if masks is not None:
        notes.append(f"blender: masks from {masks}")
    train = _split_views(root / "transforms_train.json", masks)
    test = _split_views(test_file, masks)
    frames = load_views(train + test, cfg.downscale, worker_count(cfg.num_workers),
                         cfg.image_budget_mb)
    return SceneData(
        train=frames[: len(train)],
        test=frames[len(train) :],
        points=None,
        source=str(root),
        extra={"notes": notes},
    )


def _split_views(json_path: Path, masks: Optional[Path]) -> list[ViewSpec]:
    """The views of one transforms file; they share intrinsics and the first image's size."""
    meta = read_json(json_path)
    raw_frames = frame_list(meta, json_path)
    paths = [frame_file(json_path, raw, index) for index, raw in enumerate(raw_frames)]
    check_unique(paths, json_path)
    size = image_size(paths[0], f"frame 0 of {json_path}")
    K = _intrinsics(meta, *size, json_path)
    return [
        ViewSpec(
            name=image_path.stem,
            path=image_path,
            viewmat=viewmat_from_gl(raw, json_path, index),
            K=K,
            size=size,
            where=f"frame {index} of {json_path}",
            size_source=f"the split's first image {paths[0].name}",
            mask_path=mask_file(masks, _mask_name(image_path, json_path)) if masks else None,
        )
        for index, (raw, image_path) in enumerate(zip(raw_frames, paths))
    ]


def _mask_name(image_path: Path, json_path: Path) -> str:
    """The mask of an image under the JSON file's folder keeps its relative path; any other (an
    absolute ``file_path``) is looked up by its file name."""
    folder = json_path.parent
    return image_path.relative_to(folder).as_posix() if image_path.is_relative_to(folder) else image_path.name


def _intrinsics(meta: dict[str, Any], width: int, height: int, json_path: Path) -> np.ndarray:
    """K [3,3] from ``fl_x/fl_y/cx/cy`` or ``camera_angle_x/_y`` (centred by default)."""
    for key, size in (("w", width), ("h", height)):
        if key in meta and number(meta, key, json_path) != size:
            raise DataError(f"{json_path}: '{key}' is {meta[key]} but the images are {width}x{height}")
    if "fl_x" in meta:
        fx = number(meta, "fl_x", json_path)
    elif "camera_angle_x" in meta:
        fx = focal_from_angle(meta, "camera_angle_x", width, json_path)
    else:
        raise DataError(f"{json_path}: missing key 'camera_angle_x' (or 'fl_x')")
    if "fl_y" in meta:
        fy = number(meta, "fl_y", json_path)
    elif "camera_angle_y" in meta:
        fy = focal_from_angle(meta, "camera_angle_y", height, json_path)
    else:
        fy = fx
    cx = number(meta, "cx", json_path) if "cx" in meta else width / 2
    cy = number(meta, "cy", json_path) if "cy" in meta else height / 2
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


@DATASETS.register("blender", aliases=("nerf_synthetic",))
class BlenderReader(DatasetReader):
    """NeRF-synthetic / Blender folders (transforms_train.json, transforms_test.json, PNGs)."""

    detect_hint = "blender needs transforms_train.json"

    @classmethod
    def detect(cls, path: Path) -> bool:
        return (path / "transforms_train.json").is_file()

    def load(self, path: str, cfg: DataConfig) -> SceneData:
        return load_blender(path, cfg)
