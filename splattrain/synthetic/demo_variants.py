"""Degraded variants of the demo scene, written on the fly from a seed by tests and benchmarks:
per-view exposure and white balance, jittered training poses, and a COLMAP project layout.

Every variant is rendered by the analytic ray tracer of :mod:`splattrain.synthetic.demo_scene`;
test views are always exact (true pose, neutral exposure) so scores measure the scene.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List

import numpy as np
from PIL import Image

from ..data.colmap_model import ColmapCamera, ColmapImage
from ..data.colmap_write import write_model
from .demo_scene import CAMERA_ANGLE_X, CAMERA_RADIUS, camera_positions, look_at_origin, render_view

GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])


def _focal(size: int) -> float:
    return 0.5 * size / math.tan(0.5 * CAMERA_ANGLE_X)


def _poses(n: int, phase: float) -> np.ndarray:
    return np.stack([look_at_origin(p) for p in camera_positions(n, phase)])


def _over_white(rgba: np.ndarray) -> np.ndarray:
    """Float RGB [H,W,3] in [0,1] of a straight-alpha RGBA image composited over white."""
    rgb, alpha = rgba[..., :3] / 255.0, rgba[..., 3:] / 255.0
    return rgb * alpha + (1.0 - alpha)


def _write_blender(out_dir: Path, split: str, poses: np.ndarray, images: List[np.ndarray]) -> None:
    (out_dir / split).mkdir(parents=True, exist_ok=True)
    frames = []
    for k, (c2w, image) in enumerate(zip(poses, images)):
        Image.fromarray(image).save(out_dir / split / f"r_{k}.png")
        frames.append({"file_path": f"./{split}/r_{k}", "transform_matrix": np.asarray(c2w).tolist()})
    doc = {"camera_angle_x": CAMERA_ANGLE_X, "frames": frames}
    (out_dir / f"transforms_{split}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def exposure_gains(n: int, seed: int, gain: tuple = (0.6, 1.5), balance: float = 0.15) -> np.ndarray:
    """Per-view RGB multipliers [n,3]: a gain uniform in ``gain`` times a per-channel factor in 1 +- ``balance``."""
    rng = np.random.default_rng(seed)
    g = rng.uniform(*gain, size=(n, 1))
    return g * rng.uniform(1.0 - balance, 1.0 + balance, size=(n, 3))


def write_exposure_variant(
    out_dir: Path, seed: int, *, size: int = 64, n_train: int = 32, n_test: int = 8
) -> np.ndarray:
    """The demo in Blender layout with each training view's colours (composited over white) scaled
    by its own gain and white balance, clipped to [0,1]; test views neutral. Returns the gains [n_train,3]."""
    out_dir = Path(out_dir)
    gains = exposure_gains(n_train, seed)
    focal = _focal(size)
    for split, n, phase in (("train", n_train, 0.0), ("test", n_test, 0.5)):
        poses = _poses(n, phase)
        images = []
        for k, c2w in enumerate(poses):
            rgb = _over_white(render_view(c2w, size, size, focal))
            if split == "train":
                rgb = np.clip(rgb * gains[k], 0.0, 1.0)
            images.append(np.round(rgb * 255.0).astype(np.uint8))
        _write_blender(out_dir, split, poses, images)
    return gains


def jitter_pose(c2w: np.ndarray, rng: np.random.Generator, degrees: float, distance: float) -> np.ndarray:
    """``c2w`` turned by ``degrees`` about a random axis through its centre and moved by ``distance``
    in a random direction."""
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = math.radians(degrees)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    rotation = np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k
    direction = rng.normal(size=3)
    out = np.array(c2w, dtype=np.float64)
    out[:3, :3] = rotation @ out[:3, :3]
    out[:3, 3] += distance * direction / np.linalg.norm(direction)
    return out


def write_pose_jitter_variant(
    out_dir: Path, seed: int, *, size: int = 64, n_train: int = 32, n_test: int = 8,
    degrees: tuple = (1.0, 2.0), radius_fraction: tuple = (0.01, 0.02),
) -> Dict[str, np.ndarray]:
    """The demo in Blender layout, rendered at the true poses, with each training pose written
    turned by ``degrees`` and moved by ``radius_fraction`` of the camera radius (uniform in the ranges);
    test poses exact. Returns {"true": [n,4,4], "written": [n,4,4]} OpenGL camera-to-world training poses."""
    out_dir = Path(out_dir)
    rng = np.random.default_rng(seed)
    focal = _focal(size)
    true = _poses(n_train, 0.0)
    written = np.stack([
        jitter_pose(c2w, rng, rng.uniform(*degrees), rng.uniform(*radius_fraction) * CAMERA_RADIUS) for c2w in true
    ])
    train_images = [render_view(c2w, size, size, focal) for c2w in true]
    _write_blender(out_dir, "train", written, train_images)
    test = _poses(n_test, 0.5)
    _write_blender(out_dir, "test", test, [render_view(c2w, size, size, focal) for c2w in test])
    return {"true": true, "written": written}


def write_colmap_project(root: Path, *, size: int = 48, n_views: int = 16) -> Path:
    """A COLMAP project of the demo as ``image_undistorter`` leaves it: the undistorted scene in
    ``dense/0/`` (images/ + sparse/ without 0/) and the original model in ``sparse/0/`` at the top
    with no images/ beside it. Returns the scene folder (``root/dense/0``)."""
    root = Path(root)
    focal = _focal(size)
    poses = _poses(n_views, 0.25)
    scene = root / "dense" / "0"
    (scene / "images").mkdir(parents=True, exist_ok=True)
    images = []
    for k, c2w in enumerate(poses):
        rgb = np.round(_over_white(render_view(c2w, size, size, focal)) * 255.0).astype(np.uint8)
        Image.fromarray(rgb).save(scene / "images" / f"view_{k:02d}.png")
        images.append(ColmapImage.from_viewmat(k + 1, f"view_{k:02d}.png", 1, np.linalg.inv(c2w @ GL_TO_CV)))
    no_points, no_colors = np.zeros((0, 3)), np.zeros((0, 3), dtype=np.uint8)
    pinhole = ColmapCamera(1, "PINHOLE", size, size, (focal, focal, size / 2, size / 2))
    write_model(scene / "sparse", [pinhole], images, no_points, no_colors)
    distorted = ColmapCamera(1, "SIMPLE_RADIAL", size, size, (focal, size / 2, size / 2, 0.02))
    write_model(root / "sparse" / "0", [distorted], images, no_points, no_colors)
    return scene


def main(argv: List[str] | None = None) -> None:
    """``python -m splattrain.synthetic.demo_variants OUT [--seed S] [--size N]``: writes OUT/exposure,
    OUT/pose and OUT/colmap_project (train them with ``benchmarks/bench_scenes.py``)."""
    import argparse

    from ..console import Console

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args(argv)
    write_exposure_variant(args.out_dir / "exposure", args.seed, size=args.size)
    write_pose_jitter_variant(args.out_dir / "pose", args.seed, size=args.size)
    write_colmap_project(args.out_dir / "colmap_project", size=args.size)
    Console().info(f"wrote exposure/, pose/ and colmap_project/ to {args.out_dir}")


if __name__ == "__main__":
    main()
