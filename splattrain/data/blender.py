"""Reader for the NeRF-synthetic (Blender) layout: ``transforms_{split}.json`` plus images."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..cameras import Camera
from ..errors import DataError
from .types import Frame, SceneData

# OpenGL/Blender camera axes (x right, y up, z backward) -> OpenCV (x right, y down, z forward).
_GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])


def load_blender(path: str | Path, *, test_split: str = "test") -> SceneData:
    """Load ``transforms_train.json`` and ``transforms_{test_split}.json`` from ``path``.

    Falls back to ``transforms_val.json`` when the test file is missing (noted in
    ``extra["notes"]``). Images stay uint8 RGB or RGBA; ``points`` stays None.
    Raises DataError naming the offending file for any unusable input.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: dataset folder not found")
    notes: list[str] = []
    test_file = root / f"transforms_{test_split}.json"
    val_file = root / "transforms_val.json"
    if not test_file.is_file() and val_file.is_file():
        notes.append(f"{test_file.name} not found; using {val_file.name} as the test split")
        test_file = val_file
    return SceneData(
        train=_load_split(root / "transforms_train.json"),
        test=_load_split(test_file),
        points=None,
        source=str(root),
        extra={"notes": notes},
    )


def _load_split(json_path: Path) -> list[Frame]:
    """Read one transforms file and all of its frames."""
    meta = _read_json(json_path)
    raw_frames = _require(meta, "frames", json_path)
    if not isinstance(raw_frames, list):
        raise DataError(f"{json_path}: 'frames' must be a list")
    if not raw_frames:
        raise DataError(f"{json_path}: no frames")
    frames: list[Frame] = []
    for index, raw in enumerate(raw_frames):
        if not isinstance(raw, dict):
            raise DataError(f"{json_path}: frame {index} must be a JSON object")
        image_path = _image_path(json_path, raw, index)
        image = _read_image(image_path)
        height, width = image.shape[:2]
        if frames and image.shape[:2] != frames[0].image.shape[:2]:
            first_h, first_w = frames[0].image.shape[:2]
            raise DataError(
                f"{image_path}: image is {width}x{height} but the split's first image "
                f"is {first_w}x{first_h}"
            )
        camera = Camera(
            viewmat=torch.from_numpy(_viewmat(raw, json_path, index)),
            K=torch.from_numpy(_intrinsics(meta, width, height, json_path)),
            width=width,
            height=height,
            name=image_path.stem,
        )
        frames.append(Frame(image=image, camera=camera, name=image_path.stem))
    return frames


def _read_json(json_path: Path) -> dict[str, Any]:
    """Parse a transforms file, turning every failure into a DataError."""
    if not json_path.is_file():
        raise DataError(f"{json_path}: transforms file not found")
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"{json_path}: invalid JSON ({err.msg} at line {err.lineno})") from err
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{json_path}: cannot read ({err})") from err
    if not isinstance(meta, dict):
        raise DataError(f"{json_path}: expected a JSON object at the top level")
    return meta


def _require(mapping: dict[str, Any], key: str, json_path: Path, where: str = "") -> Any:
    """``mapping[key]``, or a DataError naming the file and the missing key."""
    if key not in mapping:
        raise DataError(f"{json_path}: {where}missing key '{key}'")
    return mapping[key]


def _number(mapping: dict[str, Any], key: str, json_path: Path) -> float:
    """A finite number stored under ``key``."""
    value = mapping[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(f"{json_path}: '{key}' must be a finite number, got {value!r}")
    return float(value)


def _focal_from_angle(mapping: dict[str, Any], key: str, size: int, json_path: Path) -> float:
    """Focal length in pixels from a field-of-view angle (radians) across ``size`` pixels."""
    angle = _number(mapping, key, json_path)
    if not 0.0 < angle < math.pi:
        raise DataError(f"{json_path}: '{key}' must be in (0, pi) radians, got {angle}")
    return 0.5 * size / math.tan(0.5 * angle)


def _intrinsics(meta: dict[str, Any], width: int, height: int, json_path: Path) -> np.ndarray:
    """K [3,3] float32 from ``fl_x/fl_y/cx/cy`` or ``camera_angle_x/_y`` (centred by default)."""
    for key, size in (("w", width), ("h", height)):
        if key in meta and _number(meta, key, json_path) != size:
            raise DataError(
                f"{json_path}: '{key}' is {meta[key]} but the images are {width}x{height}"
            )
    if "fl_x" in meta:
        fx = _number(meta, "fl_x", json_path)
    elif "camera_angle_x" in meta:
        fx = _focal_from_angle(meta, "camera_angle_x", width, json_path)
    else:
        raise DataError(f"{json_path}: missing key 'camera_angle_x' (or 'fl_x')")
    if "fl_y" in meta:
        fy = _number(meta, "fl_y", json_path)
    elif "camera_angle_y" in meta:
        fy = _focal_from_angle(meta, "camera_angle_y", height, json_path)
    else:
        fy = fx
    cx = _number(meta, "cx", json_path) if "cx" in meta else width / 2
    cy = _number(meta, "cy", json_path) if "cy" in meta else height / 2
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]], dtype=np.float32)


def _viewmat(raw: dict[str, Any], json_path: Path, index: int) -> np.ndarray:
    """OpenCV world-to-camera [4,4] float32 from a frame's OpenGL camera-to-world matrix."""
    value = _require(raw, "transform_matrix", json_path, f"frame {index}: ")
    try:
        c2w = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise DataError(f"{json_path}: frame {index}: transform_matrix is not numeric") from err
    if c2w.shape != (4, 4):
        raise DataError(
            f"{json_path}: frame {index}: transform_matrix must be 4x4, got shape {c2w.shape}"
        )
    if not np.isfinite(c2w).all():
        raise DataError(f"{json_path}: frame {index}: transform_matrix has non-finite values")
    try:
        viewmat = np.linalg.inv(c2w @ _GL_TO_CV)
    except np.linalg.LinAlgError as err:
        raise DataError(f"{json_path}: frame {index}: transform_matrix is singular") from err
    return viewmat.astype(np.float32)


def _image_path(json_path: Path, raw: dict[str, Any], index: int) -> Path:
    """The frame's image file: ``file_path`` + ``.png`` if that exists, else as given."""
    file_path = _require(raw, "file_path", json_path, f"frame {index}: ")
    if not isinstance(file_path, str) or not file_path:
        raise DataError(f"{json_path}: frame {index}: file_path must be a non-empty string")
    given = json_path.parent / file_path
    with_png = given.with_name(given.name + ".png")
    for candidate in (with_png, given):
        if candidate.is_file():
            return candidate
    missing = given if given.suffix else with_png
    raise DataError(f"{missing}: image not found (frame {index} of {json_path.name})")


def _read_image(image_path: Path) -> np.ndarray:
    """Decode an image fully as uint8 RGB or RGBA [H,W,C]."""
    try:
        with Image.open(image_path) as image:
            image.load()
            if image.mode not in ("RGB", "RGBA"):
                has_alpha = "A" in image.mode or "transparency" in image.info
                image = image.convert("RGBA" if has_alpha else "RGB")
            return np.array(image, dtype=np.uint8)
    except (OSError, SyntaxError, ValueError) as err:
        raise DataError(f"{image_path}: cannot read image ({err})") from err
