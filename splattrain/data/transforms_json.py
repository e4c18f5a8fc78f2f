"""Shared parts of the ``transforms*.json`` formats (NeRF-synthetic / Blender and nerfstudio)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError

# OpenGL/Blender camera axes (x right, y up, z backward) -> OpenCV (x right, y down, z forward).
GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])


def read_json(json_path: Path) -> dict[str, Any]:
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


def require(mapping: dict[str, Any], key: str, json_path: Path, where: str = "") -> Any:
    """``mapping[key]``, or a DataError naming the file and the missing key."""
    if key not in mapping:
        raise DataError(f"{json_path}: {where}missing key '{key}'")
    return mapping[key]


def frame_list(meta: dict[str, Any], json_path: Path) -> list[dict[str, Any]]:
    """The non-empty list of frame objects under ``frames``."""
    frames = require(meta, "frames", json_path)
    if not isinstance(frames, list):
        raise DataError(f"{json_path}: 'frames' must be a list")
    if not frames:
        raise DataError(f"{json_path}: no frames")
    for index, frame in enumerate(frames):
        if not isinstance(frame, dict):
            raise DataError(f"{json_path}: frame {index} must be a JSON object")
    return frames


def number(mapping: dict[str, Any], key: str, json_path: Path, where: str = "") -> float:
    """A finite number stored under ``key`` (one > 0 for focal lengths ``fl_x`` / ``fl_y`` and sizes ``w`` / ``h``)."""
    value = mapping[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(f"{json_path}: {where}'{key}' must be a finite number, got {value!r}")
    if key in _POSITIVE and not value > 0:
        raise DataError(f"{json_path}: {where}'{key}' must be > 0, got {value!r}")
    return float(value)


_POSITIVE = ("fl_x", "fl_y", "w", "h")


def focal_from_angle(mapping: dict[str, Any], key: str, size: int, json_path: Path) -> float:
    """Focal length in pixels from a field-of-view angle (radians) across ``size`` pixels."""
    angle = number(mapping, key, json_path)
    if not 0.0 < angle < math.pi:
        raise DataError(f"{json_path}: '{key}' must be in (0, pi) radians, got {angle}")
    return 0.5 * size / math.tan(0.5 * angle)


def viewmat_from_gl(raw: dict[str, Any], json_path: Path, index: int) -> np.ndarray:
    """OpenCV world-to-camera [4,4] float64 from a frame's OpenGL camera-to-world ``transform_matrix``."""
    where = f"frame {index}: "
    value = require(raw, "transform_matrix", json_path, where)
    try:
        c2w = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise DataError(f"{json_path}: {where}transform_matrix is not numeric") from err
    if c2w.shape == (3, 4):
        c2w = np.vstack([c2w, [0.0, 0.0, 0.0, 1.0]])
    if c2w.shape != (4, 4):
        raise DataError(f"{json_path}: {where}transform_matrix must be 4x4, got shape {c2w.shape}")
    if not np.isfinite(c2w).all():
        raise DataError(f"{json_path}: {where}transform_matrix has non-finite values; fix or remove the frame")
    try:
        return np.linalg.inv(c2w @ GL_TO_CV)
    except np.linalg.LinAlgError as err:
        raise DataError(f"{json_path}: {where}transform_matrix is singular") from err


def frame_file(json_path: Path, raw: dict[str, Any], index: int, key: str = "file_path") -> Path:
    """A frame's file under ``key`` (relative to the JSON file); ``.png`` is appended when the given
    name has no such file but the name plus ``.png`` exists (Blender writes paths without extensions)."""
    file_path = require(raw, key, json_path, f"frame {index}: ")
    if not isinstance(file_path, str) or not file_path:
        raise DataError(f"{json_path}: frame {index}: {key} must be a non-empty string")
    given = json_path.parent / file_path
    with_png = given.with_name(given.name + ".png")
    if not given.is_file() and with_png.is_file():
        return with_png
    return given if given.suffix else with_png


def check_unique(paths: list[Path], json_path: Path) -> None:
    """DataError when two frames of one file refer to the same image."""
    first: dict[Path, int] = {}
    for index, path in enumerate(paths):
        if path in first:
            raise DataError(
                f"{json_path}: frames {first[path]} and {index} both use {path}; "
                "remove the duplicate frame (each image may appear once)"
            )
        first[path] = index
