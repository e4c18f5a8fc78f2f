"""Writing COLMAP sparse models (cameras, images, points3D) in binary or text form, with the points'
tracks and each image's 2D observations when given."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Optional

import numpy as np

from .colmap import camera_intrinsics
from .colmap_model import CAMERA_MODELS, ColmapCamera, ColmapImage


def write_model(
    sparse: Path,
    cameras: list[ColmapCamera],
    images: list[ColmapImage],
    points: np.ndarray,
    colors: np.ndarray,
    binary: bool = True,
    tracks: Optional[np.ndarray] = None,
) -> None:
    """Write a sparse model to ``sparse`` in binary or text form.

    ``tracks`` (int [T, 2]: point index into ``points``, image id) are the observations: each becomes
    a 2D point of its image, at the point's projection through the image's camera, and an entry of
    the point's track. Without them the model has no 2D points or tracks.
    """
    sparse.mkdir(parents=True, exist_ok=True)
    tracks = np.zeros((0, 2), dtype=np.int64) if tracks is None else np.asarray(tracks, dtype=np.int64)
    observed = _observations(cameras, images, points, tracks)
    track_of: list[list[tuple[int, int]]] = [[] for _ in range(len(points))]
    for image in images:
        for slot, (_, _, index) in enumerate(observed[image.id]):
            track_of[index].append((image.id, slot))
    model_ids = {name: model_id for model_id, (name, _) in CAMERA_MODELS.items()}
    if binary:
        data = [struct.pack("<Q", len(cameras))]
        for c in cameras:
            data.append(struct.pack(f"<IiQQ{len(c.params)}d", c.id, model_ids[c.model], c.width, c.height, *c.params))
        (sparse / "cameras.bin").write_bytes(b"".join(data))
        data = [struct.pack("<Q", len(images))]
        for i in images:
            data.append(struct.pack("<I4d3dI", i.id, *i.qvec, *i.tvec, i.camera_id) + i.name.encode() + b"\0")
            data.append(struct.pack("<Q", len(observed[i.id])))
            data += [struct.pack("<2dQ", x, y, index + 1) for x, y, index in observed[i.id]]
        (sparse / "images.bin").write_bytes(b"".join(data))
        data = [struct.pack("<Q", len(points))]
        for index, (xyz, rgb) in enumerate(zip(points, colors)):
            track = track_of[index]
            data.append(struct.pack("<Q3d3BdQ", index + 1, *xyz, *rgb, 0.0, len(track)))
            data += [struct.pack("<II", image_id, slot) for image_id, slot in track]
        (sparse / "points3D.bin").write_bytes(b"".join(data))
        return
    lines = [f"{c.id} {c.model} {c.width} {c.height} {' '.join(repr(p) for p in c.params)}" for c in cameras]
    (sparse / "cameras.txt").write_text("# Camera list\n" + "\n".join(lines) + "\n")
    lines = []
    for i in images:
        points2d = " ".join(f"{x!r} {y!r} {index + 1}" for x, y, index in observed[i.id])
        lines += [f"{i.id} {' '.join(repr(v) for v in (*i.qvec, *i.tvec))} {i.camera_id} {i.name}", points2d]
    (sparse / "images.txt").write_text("# Image list with two lines of data per image\n" + "\n".join(lines) + "\n")
    lines = []
    for n, ((x, y, z), (r, g, b)) in enumerate(zip(points.tolist(), colors.tolist())):
        track = "".join(f" {image_id} {slot}" for image_id, slot in track_of[n])
        lines.append(f"{n + 1} {x!r} {y!r} {z!r} {r} {g} {b} 0.0{track}")
    (sparse / "points3D.txt").write_text("# 3D point list\n" + "\n".join(lines) + ("\n" if lines else ""))


def _observations(cameras: list[ColmapCamera], images: list[ColmapImage], points: np.ndarray,
                  tracks: np.ndarray) -> dict[int, list[tuple[float, float, int]]]:
    """Per image id, its 2D points (x, y, point index): the observed points projected through its camera."""
    by_id = {camera.id: camera for camera in cameras}
    observed: dict[int, list[tuple[float, float, int]]] = {}
    for image in images:
        indices = np.unique(tracks[tracks[:, 1] == image.id, 0])
        if not len(indices):
            observed[image.id] = []
            continue
        K, distortion = camera_intrinsics(by_id[image.camera_id], Path("cameras"))
        viewmat = image.viewmat()
        cam = np.asarray(points, dtype=np.float64)[indices] @ viewmat[:3, :3].T + viewmat[:3, 3]
        z = np.where(np.abs(cam[:, 2]) > 1e-12, cam[:, 2], 1e-12)
        x, y = distortion.apply(cam[:, 0] / z, cam[:, 1] / z)
        u, v = K[0, 0] * x + K[0, 2], K[1, 1] * y + K[1, 2]
        observed[image.id] = [(float(a), float(b), int(i)) for a, b, i in zip(u, v, indices)]
    return observed
