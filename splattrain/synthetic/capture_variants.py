"""Variants of a COLMAP scene that capture what real phone and internet photo sets do: fewer photos,
part of an orbit, low resolution, imperfect poses, a distorted lens.

    python -m splattrain.synthetic.capture_variants SCENE OUT [--variants half_orbit every_fourth ...]
        [--size WIDTH] [--seed S]

``SCENE`` is a COLMAP scene folder (``images/`` and ``sparse/0``): the cup capture, or the dome of
``python -m splattrain.synthetic.large_scene``. Each variant is a new scene folder ``OUT/<variant>``
(``images/``, ``sparse/0/`` and ``variant.json``, which names its test views and the settings to
train it with: ``overrides``, as ``dotted.key=value``):

- ``original``: the scene as it is (at ``--size``), for reference.
- ``half_orbit``: the cameras of the half of the orbit that holds the most of them; the test views
  are the cameras at the two ends of that arc (views the training photos only partly cover).
- ``every_fourth``: every fourth photo (by name, from the third), as a sparse capture, with the
  full capture's test views to score it on (none of them is a training photo).
- ``eighth_res``: the photos at 1/8 of their size (intrinsics follow), trained as they are
  (``data.downscale=1``).
- ``pose_noise``: each training camera turned by ``--degrees`` about a random axis and moved by
  ``--shift`` of the cameras' spread; images and test cameras as they were.
- ``distorted``: the photos warped by an OPENCV lens (k1, k2), written with that camera model, so
  the reader undistorts them at load (pinhole scenes only).

The test views of every variant but ``half_orbit`` are those the reader's default split picks on
the full capture (every 8th photo by name), listed explicitly in the overrides; ``--size`` shrinks
every photo to that width first (a small copy for quick runs).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from PIL import Image

from ..data.colmap import find_sparse
from ..data.colmap_model import ColmapCamera, ColmapImage, read_model
from ..data.colmap_write import write_model
from ..data.distortion import Distortion
from ..errors import DataError
from .demo_variants import jitter_pose

VARIANTS = ("original", "half_orbit", "every_fourth", "eighth_res", "pose_noise", "distorted")
_PINHOLE = ("SIMPLE_PINHOLE", "PINHOLE")
_SINGLE_FOCAL = ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL", "SIMPLE_RADIAL_FISHEYE", "RADIAL_FISHEYE")


@dataclass
class View:
    """One photo of a variant: its pixels, camera and pose."""

    name: str
    pixels: np.ndarray  # uint8 [H, W, 3]
    camera: ColmapCamera
    viewmat: np.ndarray  # world-to-camera [4, 4] float64
    observed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # its points' indices


@dataclass
class Capture:
    """A scene's views (sorted by name) and sparse points."""

    views: List[View]
    points: np.ndarray
    colors: np.ndarray


def read_capture(scene: Path, width: Optional[int] = None) -> Capture:
    """The COLMAP scene in ``scene``, each photo shrunk to ``width`` pixels wide when given."""
    sparse = find_sparse(Path(scene))
    if sparse is None:
        raise DataError(f"{scene}: no COLMAP model (sparse/0 or sparse) to make capture variants of")
    model = read_model(sparse)
    observed = model.observed_points()
    views = []
    for image in sorted(model.images, key=lambda i: i.name):
        with Image.open(Path(scene) / "images" / image.name) as file:
            pixels = np.asarray(file.convert("RGB"))
        view = View(image.name, pixels, model.cameras[image.camera_id], image.viewmat(),
                    observed.get(image.id, np.zeros(0, dtype=np.int64)))
        views.append(resized(view, width / pixels.shape[1]) if width else view)
    return Capture(views, model.points, model.colors)


def resized(view: View, factor: float) -> View:
    """``view`` with its photo and intrinsics scaled by ``factor`` (distortion unchanged)."""
    height, width = view.pixels.shape[:2]
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    image = Image.fromarray(view.pixels).resize(size, Image.Resampling.BOX if factor < 1 else Image.Resampling.BICUBIC)
    sx, sy = size[0] / view.camera.width, size[1] / view.camera.height
    params = list(view.camera.params)
    if view.camera.model in _SINGLE_FOCAL:
        params[0:3] = [params[0] * sx, params[1] * sx, params[2] * sy]
    else:
        params[0:4] = [params[0] * sx, params[1] * sy, params[2] * sx, params[3] * sy]
    camera = replace(view.camera, width=size[0], height=size[1], params=tuple(params))
    return replace(view, pixels=np.asarray(image), camera=camera)


def default_test_names(names: Sequence[str], test_every: int = 8) -> List[str]:
    """The views the reader's default split holds out: every ``test_every``-th name, from the first."""
    return [name for i, name in enumerate(sorted(names)) if i % test_every == 0]


def centres(views: Sequence[View]) -> np.ndarray:
    """Camera centres [N, 3] in world coordinates."""
    return np.stack([-v.viewmat[:3, :3].T @ v.viewmat[:3, 3] for v in views])


def half_orbit(views: List[View], ends: int = 0) -> tuple[List[View], List[str]]:
    """The views within the half turn around the cameras' centre that holds the most of them, and
    the names of the ``ends`` cameras at each end of it (0: one per 16 kept views, at least one)."""
    c = centres(views)
    c = c - c.mean(0)
    _, _, axes = np.linalg.svd(c, full_matrices=False)  # the last axis is the orbit's normal
    azimuth = np.arctan2(c @ axes[1], c @ axes[0])
    best: List[int] = []
    for start in azimuth:
        turn = np.mod(azimuth - start, 2 * math.pi)
        inside = [i for i in np.argsort(turn) if turn[i] <= math.pi]
        if len(inside) > len(best):
            best = inside
    ends = ends or max(1, round(len(best) / 16))
    tests = [views[i].name for i in best[:ends] + best[-ends:]]
    return [views[i] for i in sorted(best)], tests


def noisy_poses(views: List[View], tests: Sequence[str], degrees: float, shift: float, seed: int) -> List[View]:
    """Training views turned by ``degrees`` and moved by ``shift`` x the cameras' spread; test views as they were."""
    rng = np.random.default_rng(seed)
    c = centres(views)
    spread = float(np.median(np.linalg.norm(c - c.mean(0), axis=1)))
    out = []
    for view in views:
        if view.name in tests:
            out.append(view)
            continue
        c2w = jitter_pose(np.linalg.inv(view.viewmat), rng, degrees, shift * spread)
        out.append(replace(view, viewmat=np.linalg.inv(c2w)))
    return out


def distorted(view: View, k1: float, k2: float) -> View:
    """``view`` as an OPENCV camera with radial terms ``k1``, ``k2`` would have taken it: every
    pixel of the new photo is sampled (bilinear) where the pinhole photo sees its ray."""
    camera = view.camera
    if camera.model not in _PINHOLE:
        raise DataError(f"{view.name}: the distorted variant needs a pinhole camera, not {camera.model}")
    p = camera.params
    fx, fy, cx, cy = (p[0], p[0], p[1], p[2]) if camera.model == "SIMPLE_PINHOLE" else p[:4]
    height, width = view.pixels.shape[:2]
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    xd, yd = (u - cx) / fx, (v - cy) / fy
    lens = Distortion(radial=(k1, k2))
    x, y = xd.copy(), yd.copy()
    for _ in range(30):  # undistort by fixed-point iteration: apply(x, y) = (xd, yd)
        ax, ay = lens.apply(x, y)
        x, y = x + (xd - ax), y + (yd - ay)
    grid = torch.from_numpy(np.stack([(fx * x + cx) / width * 2 - 1, (fy * y + cy) / height * 2 - 1], -1)).float()
    source = torch.from_numpy(view.pixels.astype(np.float32)).permute(2, 0, 1)[None]
    warped = torch.nn.functional.grid_sample(source, grid[None], mode="bilinear", padding_mode="border",
                                             align_corners=False)[0].permute(1, 2, 0).numpy()
    opencv = ColmapCamera(camera.id, "OPENCV", width, height, (fx, fy, cx, cy, k1, k2, 0.0, 0.0))
    return replace(view, pixels=np.round(warped).clip(0, 255).astype(np.uint8), camera=opencv)


def make_variant(capture: Capture, variant: str, *, degrees: float = 0.5, shift: float = 0.01,
                 k1: float = -0.12, k2: float = 0.02, seed: int = 0) -> tuple[List[View], List[str], List[str]]:
    """(views, test view names, extra overrides) of ``variant`` of ``capture``."""
    views = list(capture.views)
    if variant not in VARIANTS:
        raise DataError(f"capture variant {variant!r}: use one of {', '.join(VARIANTS)}")
    extra: List[str] = []
    if variant == "half_orbit":
        views, tests = half_orbit(views)
        return views, tests, extra
    tests = default_test_names([v.name for v in views])
    if variant == "every_fourth":  # a sparse capture beside the full capture's test views
        views = [view for index, view in enumerate(views) if index % 4 == 2 or view.name in tests]
    if variant == "eighth_res":
        views = [resized(v, 1 / 8) for v in views]
        extra = ["data.downscale=1"]
    elif variant == "pose_noise":
        views = noisy_poses(views, tests, degrees, shift, seed)
    elif variant == "distorted":
        views = [distorted(v, k1, k2) for v in views]
    return views, tests, extra


def write_scene(out: Path, views: Sequence[View], capture: Capture) -> None:
    """``out/images`` and ``out/sparse/0`` (one camera per photo) for ``views``, with the tracks of
    the points they observed."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    cameras, images, tracks = [], [], []
    for index, view in enumerate(views, start=1):
        path = out / "images" / view.name
        path.parent.mkdir(parents=True, exist_ok=True)
        options = {"quality": 95} if path.suffix.lower() in (".jpg", ".jpeg") else {}
        Image.fromarray(view.pixels).save(path, **options)
        cameras.append(replace(view.camera, id=index))
        images.append(ColmapImage.from_viewmat(index, view.name, index, view.viewmat))
        tracks.append(np.stack([view.observed, np.full(len(view.observed), index)], 1))
    write_model(out / "sparse" / "0", cameras, images, capture.points, capture.colors, tracks=np.concatenate(tracks))


def write_variants(scene: Path, out: Path, variants: Sequence[str] = VARIANTS, width: Optional[int] = None,
                   **options: float) -> Dict[str, Path]:
    """Write each of ``variants`` of the COLMAP scene ``scene`` to ``out/<variant>``; returns the folders."""
    capture = read_capture(scene, width)
    written = {}
    for variant in variants:
        views, tests, extra = make_variant(capture, variant, **options)
        folder = Path(out) / variant
        write_scene(folder, views, capture)
        names = ",".join(json.dumps(name) for name in tests)
        doc = {"variant": variant, "source": Path(scene).name, "views": len(views), "test_images": tests,
               "overrides": ["data.test_every=0", f"data.test_images=[{names}]", *extra]}
        (folder / "variant.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        written[variant] = folder
    return written


def main(argv: Optional[List[str]] = None) -> None:
    """Command line entry point."""
    from ..console import Console

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scene", type=Path, help="a COLMAP scene folder (images/ and sparse/0)")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--size", type=int, default=None, help="shrink every photo to this width first")
    parser.add_argument("--degrees", type=float, default=0.5, help="pose_noise: rotation of each training camera")
    parser.add_argument("--shift", type=float, default=0.01, help="pose_noise: move, as a share of the cameras' spread")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    written = write_variants(args.scene, args.out_dir, args.variants, args.size, degrees=args.degrees,
                             shift=args.shift, seed=args.seed)
    Console().info(f"wrote {', '.join(written)} to {args.out_dir}")


if __name__ == "__main__":
    main()
