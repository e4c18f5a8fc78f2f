"""Parsing COLMAP sparse models (cameras, images, points3D) in binary or text form.

Every failure is a DataError that names the file (and line, image or camera) at fault.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import DataError

#: COLMAP camera model id -> (name, number of parameters).
CAMERA_MODELS: dict[int, tuple[str, int]] = {
    0: ("SIMPLE_PINHOLE", 3),
    1: ("PINHOLE", 4),
    2: ("SIMPLE_RADIAL", 4),
    3: ("RADIAL", 5),
    4: ("OPENCV", 8),
    5: ("OPENCV_FISHEYE", 8),
    6: ("FULL_OPENCV", 12),
    7: ("FOV", 5),
    8: ("SIMPLE_RADIAL_FISHEYE", 4),
    9: ("RADIAL_FISHEYE", 5),
    10: ("THIN_PRISM_FISHEYE", 12),
    11: ("RAD_TAN_THIN_PRISM_FISHEYE", 16),
    12: ("SIMPLE_DIVISION", 4),
    13: ("DIVISION", 5),
    14: ("SIMPLE_FISHEYE", 3),
    15: ("FISHEYE", 4),
    16: ("EUCM", 6),
}
_PARAMS_BY_NAME = {name: count for name, count in CAMERA_MODELS.values()}


@dataclass(frozen=True)
class ColmapCamera:
    """A camera of cameras.bin / cameras.txt."""

    id: int
    model: str
    width: int
    height: int
    params: tuple[float, ...]


@dataclass(frozen=True)
class ColmapImage:
    """A registered image of images.bin / images.txt (pose is world-to-camera)."""

    id: int
    name: str
    camera_id: int
    qvec: tuple[float, float, float, float]  # w, x, y, z
    tvec: tuple[float, float, float]

    @classmethod
    def from_viewmat(cls, image_id: int, name: str, camera_id: int, viewmat: np.ndarray) -> ColmapImage:
        """The image whose world-to-camera pose is ``viewmat`` [4, 4] (rigid)."""
        R = np.asarray(viewmat, dtype=np.float64)[:3, :3]
        # Shepperd's method: pick the largest of w, x, y, z to divide by.
        trace = np.trace(R)
        candidates = [trace, R[0, 0], R[1, 1], R[2, 2]]
        k = int(np.argmax(candidates))
        if k == 0:
            w = 0.5 * math.sqrt(1.0 + trace)
            q = (w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w))
        else:
            i, j, m = k - 1, k % 3, (k + 1) % 3
            v = [0.0, 0.0, 0.0]
            v[i] = 0.5 * math.sqrt(1.0 + R[i, i] - R[j, j] - R[m, m])
            v[j] = (R[j, i] + R[i, j]) / (4 * v[i])
            v[m] = (R[m, i] + R[i, m]) / (4 * v[i])
            q = ((R[m, j] - R[j, m]) / (4 * v[i]), *v)
        tvec = tuple(float(t) for t in np.asarray(viewmat, dtype=np.float64)[:3, 3])
        return cls(image_id, name, camera_id, tuple(float(c) for c in q), tvec)  # type: ignore[arg-type]

    def viewmat(self) -> np.ndarray:
        """World-to-camera [4, 4] float64 (COLMAP cameras already use OpenCV axes)."""
        w, x, y, z = np.asarray(self.qvec) / np.linalg.norm(self.qvec)
        rotation = np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
            ]
        )
        viewmat = np.eye(4)
        viewmat[:3, :3] = rotation
        viewmat[:3, 3] = self.tvec
        return viewmat


@dataclass
class ColmapModel:
    """A whole sparse model, with the files it came from (for messages)."""

    cameras: dict[int, ColmapCamera]
    images: list[ColmapImage]  # file order
    points: np.ndarray  # float64 [P, 3]
    colors: np.ndarray  # uint8 [P, 3]
    cameras_file: Path
    images_file: Path
    points_file: Optional[Path]
    tracks: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    """int64 [T, 2]: every observation in the points' tracks, as (point index into ``points``, image id)."""

    def observed_points(self) -> dict[int, np.ndarray]:
        """Per image id, the indices (into ``points``) of the points its photo observed, ascending."""
        order = np.lexsort((self.tracks[:, 0], self.tracks[:, 1]))
        tracks = self.tracks[order]
        ids, starts = np.unique(tracks[:, 1], return_index=True)
        return {int(i): np.unique(part) for i, part in zip(ids, np.split(tracks[:, 0], starts[1:]))}


def model_files(sparse: Path) -> Optional[tuple[Path, Path, Path]]:
    """(cameras, images, points3D) paths in ``sparse`` (binary preferred), or None without cameras."""
    for ext in (".bin", ".txt"):
        cameras = sparse / f"cameras{ext}"
        if cameras.is_file():
            return cameras, sparse / f"images{ext}", sparse / f"points3D{ext}"
    return None


def read_model(sparse: Path) -> ColmapModel:
    """Read and check the model in ``sparse`` (cameras.bin/images.bin/points3D.bin or the .txt files)."""
    files = model_files(sparse)
    if files is None:
        raise DataError(f"{sparse}: no cameras.bin or cameras.txt; point data.path at a COLMAP scene folder")
    cameras_file, images_file, points_file = files
    if not images_file.is_file():
        raise DataError(f"{images_file}: not found next to {cameras_file.name}; re-export the COLMAP model")
    binary = cameras_file.suffix == ".bin"
    cameras = _read_cameras_binary(cameras_file) if binary else _read_cameras_text(cameras_file)
    images = _read_images_binary(images_file) if binary else _read_images_text(images_file)
    if points_file.is_file():
        points, colors, tracks = _read_points_binary(points_file) if binary else _read_points_text(points_file)
    else:
        points, colors, tracks = np.zeros((0, 3)), np.zeros((0, 3), dtype=np.uint8), np.zeros((0, 2), dtype=np.int64)
    model = ColmapModel(
        cameras, images, points, colors, cameras_file, images_file, points_file if points_file.is_file() else None,
        tracks,
    )
    _check(model)
    return model


def _check(model: ColmapModel) -> None:
    """Reject models that would train on wrong or missing data."""
    for camera in model.cameras.values():
        if camera.width <= 0 or camera.height <= 0:
            raise DataError(f"{model.cameras_file}: camera {camera.id} has size {camera.width}x{camera.height}")
        if not all(math.isfinite(p) for p in camera.params):
            raise DataError(
                f"{model.cameras_file}: camera {camera.id} has non-finite parameters {list(camera.params)}; "
                "re-run COLMAP's bundle adjustment or fix the camera"
            )
    if not model.images:
        raise DataError(
            f"{model.images_file}: no registered images; COLMAP's mapper failed to register any, "
            "so re-run it (or point data.path at a scene with a usable model)"
        )
    seen: dict[str, int] = {}
    for image in model.images:
        label = f"image '{image.name}' (id {image.id})"
        if image.camera_id not in model.cameras:
            raise DataError(
                f"{model.images_file}: {label} uses camera {image.camera_id}, which {model.cameras_file.name} "
                f"does not define (it has {sorted(model.cameras)}); re-export the model from COLMAP"
            )
        if not all(math.isfinite(v) for v in (*image.qvec, *image.tvec)):
            raise DataError(
                f"{model.images_file}: {label} has a non-finite pose (qvec {list(image.qvec)}, "
                f"tvec {list(image.tvec)}); re-run COLMAP or delete the image from the model"
            )
        if math.hypot(*image.qvec) < 1e-12:
            raise DataError(f"{model.images_file}: {label} has a zero rotation quaternion; re-run COLMAP")
        if image.name in seen:
            raise DataError(
                f"{model.images_file}: image '{image.name}' is listed twice (ids {seen[image.name]} and {image.id}); "
                "remove the duplicate or re-export the model from COLMAP"
            )
        seen[image.name] = image.id
    finite = np.isfinite(model.points).all(axis=1)
    if not finite.all():
        raise DataError(
            f"{model.points_file}: point #{int(np.flatnonzero(~finite)[0]) + 1} has non-finite coordinates; "
            "re-run COLMAP or delete the point"
        )


# --- binary -------------------------------------------------------------------------------


class _BinaryFile:
    """Sequential little-endian reads from a file, with truncation reported as a DataError."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = path.read_bytes()
        except OSError as err:
            raise DataError(f"{path}: cannot read ({err})") from err
        self.offset = 0

    def read(self, fmt: str, what: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise DataError(
                f"{self.path}: file ends inside {what} (truncated or not a COLMAP binary file); re-export the model"
            )
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return values

    def count(self, record_size: int, what: str) -> int:
        """A uint64 count of records of at least ``record_size`` bytes, refused before anything is
        allocated when the rest of the file cannot hold that many."""
        (count,) = self.read("<Q", f"the {what} count")
        left = len(self.data) - self.offset
        if count * record_size > left:
            raise DataError(
                f"{self.path}: declares {count} {what}s, more than its {left} remaining bytes can hold "
                "(truncated or not a COLMAP binary file); re-export the model"
            )
        return count

    def skip(self, size: int, what: str) -> None:
        if self.offset + size > len(self.data):
            raise DataError(f"{self.path}: file ends inside {what} (truncated); re-export the model")
        self.offset += size

    def string(self, what: str) -> str:
        end = self.data.find(b"\0", self.offset)
        if end < 0:
            raise DataError(f"{self.path}: file ends inside {what} (truncated); re-export the model")
        raw = self.data[self.offset : end]
        self.offset = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{self.path}: {what} is not valid UTF-8 ({raw!r})") from err

    def finish(self, what: str) -> None:
        extra = len(self.data) - self.offset
        if extra:
            raise DataError(
                f"{self.path}: {extra} unexpected bytes after the last {what} (corrupted file); re-export the model"
            )


def _add_camera(cameras: dict[int, ColmapCamera], camera: ColmapCamera, path: Path, line_no: int = 0) -> None:
    """Add ``camera``; a second camera with the same id is an error."""
    if camera.id in cameras:
        where = f" line {line_no}" if line_no else ""
        raise DataError(f"{path}{where}: camera {camera.id} is defined twice; re-export the model from COLMAP")
    cameras[camera.id] = camera


def _read_cameras_binary(path: Path) -> dict[int, ColmapCamera]:
    f = _BinaryFile(path)
    count = f.count(struct.calcsize("<IiQQ"), "camera")
    cameras: dict[int, ColmapCamera] = {}
    for index in range(count):
        camera_id, model_id, width, height = f.read("<IiQQ", f"camera #{index + 1}")
        if model_id not in CAMERA_MODELS:
            raise DataError(
                f"{path}: camera {camera_id} has unknown model id {model_id}; this is not a COLMAP camera model"
            )
        model, num_params = CAMERA_MODELS[model_id]
        params = f.read(f"<{num_params}d", f"the parameters of camera {camera_id}")
        _add_camera(cameras, ColmapCamera(camera_id, model, width, height, params), path)
    f.finish("camera")
    return cameras


def _read_images_binary(path: Path) -> list[ColmapImage]:
    f = _BinaryFile(path)
    count = f.count(struct.calcsize("<I4d3dI") + 1 + 8, "image")
    images = []
    for index in range(count):
        image_id, qw, qx, qy, qz, tx, ty, tz, camera_id = f.read("<I4d3dI", f"image #{index + 1}")
        name = f.string(f"the name of image {image_id}")
        (num_points,) = f.read("<Q", f"the 2D point count of image '{name}'")
        f.skip(24 * num_points, f"the 2D points of image '{name}'")
        images.append(ColmapImage(image_id, name, camera_id, (qw, qx, qy, qz), (tx, ty, tz)))
    f.finish("image")
    return images


def _read_points_binary(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xyz, rgb, tracks as (point index, image id) rows) of a points3D.bin."""
    f = _BinaryFile(path)
    count = f.count(struct.calcsize("<Q3d3BdQ"), "point")
    xyz = np.empty((count, 3))
    rgb = np.empty((count, 3), dtype=np.uint8)
    lengths = np.empty(count, dtype=np.int64)
    images = []
    for index in range(count):
        values = f.read("<Q3d3BdQ", f"point #{index + 1}")
        xyz[index], rgb[index], lengths[index] = values[1:4], values[4:7], values[8]
        start = f.offset
        f.skip(8 * values[8], f"the track of point {values[0]}")
        images.append(np.frombuffer(f.data, "<u4", 2 * values[8], start)[::2])
    f.finish("point")
    tracks = np.stack([np.repeat(np.arange(count), lengths), np.concatenate(images or [np.zeros(0)])], 1)
    return xyz, rgb, tracks.astype(np.int64).reshape(-1, 2)


# --- text -----------------------------------------------------------------------------------


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: cannot read ({err})") from err


def _numbers(path: Path, line_no: int, fields: list[str], kind: type, what: str) -> list:
    try:
        return [kind(v) for v in fields]
    except ValueError:
        raise DataError(f"{path} line {line_no}: {what} must be numbers, got {' '.join(fields)!r}") from None


def _read_cameras_text(path: Path) -> dict[int, ColmapCamera]:
    cameras: dict[int, ColmapCamera] = {}
    for line_no, line in enumerate(_lines(path), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 4:
            raise DataError(f"{path} line {line_no}: expected 'CAMERA_ID MODEL WIDTH HEIGHT PARAMS...'")
        camera_id, width, height = _numbers(path, line_no, [fields[0], *fields[2:4]], int, "id, width and height")
        model = fields[1]
        if model not in _PARAMS_BY_NAME:
            known = ", ".join(_PARAMS_BY_NAME)
            raise DataError(
                f"{path} line {line_no}: camera {camera_id} has unknown model {model!r} (COLMAP has {known})"
            )
        params = _numbers(path, line_no, fields[4:], float, "camera parameters")
        if len(params) != _PARAMS_BY_NAME[model]:
            raise DataError(
                f"{path} line {line_no}: camera {camera_id} ({model}) needs {_PARAMS_BY_NAME[model]} parameters, "
                f"got {len(params)}"
            )
        _add_camera(cameras, ColmapCamera(camera_id, model, width, height, tuple(params)), path, line_no)
    return cameras


def _read_images_text(path: Path) -> list[ColmapImage]:
    """Images are two lines each: the pose line, then the (possibly empty) 2D points line."""
    lines = _lines(path)
    images = []
    line_no = 0
    while line_no < len(lines):
        line = lines[line_no].strip()
        line_no += 1
        if not line or line.startswith("#"):
            continue
        fields = line.split(maxsplit=9)
        if len(fields) != 10:
            raise DataError(f"{path} line {line_no}: expected 'IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME'")
        image_id, camera_id = _numbers(path, line_no, [fields[0], fields[8]], int, "image and camera ids")
        qw, qx, qy, qz, tx, ty, tz = _numbers(path, line_no, fields[1:8], float, "the pose")
        images.append(ColmapImage(image_id, fields[9], camera_id, (qw, qx, qy, qz), (tx, ty, tz)))
        line_no += 1  # the 2D points line
    return images


def _read_points_text(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xyz, rgb, tracks as (point index, image id) rows) of a points3D.txt."""
    xyz, rgb, tracks = [], [], []
    for line_no, line in enumerate(_lines(path), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 8:
            raise DataError(f"{path} line {line_no}: expected 'POINT3D_ID X Y Z R G B ERROR TRACK[]'")
        xyz.append(_numbers(path, line_no, fields[1:4], float, "X Y Z"))
        rgb.append(_numbers(path, line_no, fields[4:7], int, "R G B"))
        if not all(0 <= c <= 255 for c in rgb[-1]):
            raise DataError(f"{path} line {line_no}: colour {rgb[-1]} is outside 0..255")
        if len(fields) % 2:
            raise DataError(f"{path} line {line_no}: a track is pairs of IMAGE_ID POINT2D_IDX")
        track = _numbers(path, line_no, fields[8::2], int, "the track's image ids")
        tracks += [(len(xyz) - 1, image_id) for image_id in track]
    return (np.array(xyz, dtype=np.float64).reshape(-1, 3), np.array(rgb, dtype=np.uint8).reshape(-1, 3),
            np.array(tracks, dtype=np.int64).reshape(-1, 2))
