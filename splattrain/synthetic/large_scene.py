"""A large COLMAP-like scene from the demo's ray tracer: many views at camera resolution and a
dense noisy sparse cloud, for end-to-end runs at real size.

    python -m splattrain.synthetic.large_scene OUT [--views 200] [--width 1000] [--height 667] [--points 300000]

Writes ``OUT/images/view_XXXX.jpg`` (the demo's objects inside a textured dome, so that every
pixel shows a surface, as in a real capture; one ray per pixel centre) and ``OUT/sparse/0/`` (one PINHOLE camera, the poses, and ``--points`` points sampled
from the surfaces the views see, moved by Gaussian noise of ``--noise`` world units, with the
colours the tracer gives them), which ``configs/colmap.yaml`` trains directly.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from ..data.colmap_model import ColmapCamera, ColmapImage
from ..data.colmap_write import write_model
from .demo_scene import CAMERA_ANGLE_X, SCENE, _ahead, camera_positions, look_at_origin, trace_rays

GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])


@dataclass(frozen=True)
class Dome:
    """The inside of a sphere around the scene, in checks of ``cells`` by ``cells`` per quarter turn
    shaded from a dark floor to a light top: the room or landscape around a real capture."""

    radius: float = 9.0
    cells: int = 6
    light: tuple = (0.85, 0.82, 0.75)
    dark: tuple = (0.35, 0.45, 0.55)

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        b = dirs @ origin
        disc = b * b - (origin @ origin - self.radius**2)
        return _ahead(-b + np.sqrt(np.maximum(disc, 0.0)), disc >= 0.0)  # the far side: seen from inside

    def surface(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        normals = -points / self.radius  # facing the centre
        azimuth = np.arctan2(points[:, 1], points[:, 0])
        elevation = np.arcsin(np.clip(points[:, 2] / self.radius, -1.0, 1.0))
        step = math.pi / 2 / self.cells
        check = (np.floor(azimuth / step) + np.floor(elevation / step)) % 2
        albedo = np.where(check[:, None] > 0, np.asarray(self.light), np.asarray(self.dark))
        return normals, albedo * (0.75 + 0.25 * (points[:, 2:3] / self.radius + 1.0) / 2.0)


WORLD = (*SCENE, Dome())


def pixel_rays(c2w_opengl: np.ndarray, width: int, height: int, focal: float, pixels: np.ndarray) -> np.ndarray:
    """Unit world directions [P, 3] through the centres of ``pixels`` (flat indices, row-major)."""
    v, u = np.divmod(pixels, width)
    x, y = (u + 0.5 - width / 2) / focal, (height / 2 - v - 0.5) / focal
    dirs = np.stack([x, y, -np.ones_like(x)], axis=-1) @ c2w_opengl[:3, :3].T
    return dirs / np.linalg.norm(dirs, axis=1, keepdims=True)


def render_rgb(c2w_opengl: np.ndarray, width: int, height: int, focal: float) -> np.ndarray:
    """uint8 RGB [H, W, 3]: one ray per pixel centre."""
    dirs = pixel_rays(c2w_opengl, width, height, focal, np.arange(width * height))
    rgb, _ = trace_rays(c2w_opengl[:3, 3], dirs, WORLD)
    return np.round(rgb.reshape(height, width, 3) * 255.0).astype(np.uint8)


def surface_points(poses: np.ndarray, width: int, height: int, focal: float, count: int, noise: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` points on the surfaces the views see (random pixels of random views), moved by
    Gaussian noise of ``noise`` world units, with their traced colours as uint8."""
    points, colors = [], []
    found = 0
    while found < count:
        c2w = poses[rng.integers(len(poses))]
        dirs = pixel_rays(c2w, width, height, focal, rng.integers(0, width * height, size=50_000))
        rgb, hit = trace_rays(c2w[:3, 3], dirs, WORLD)
        ts = _hit_distances(c2w[:3, 3], dirs, hit)
        keep = hit >= 0
        points.append(c2w[:3, 3] + ts[keep, None] * dirs[keep])
        colors.append(np.round(rgb[keep] * 255.0).astype(np.uint8))
        found += int(keep.sum())
    xyz = np.concatenate(points)[:count]
    return xyz + rng.normal(scale=noise, size=xyz.shape), np.concatenate(colors)[:count]


def _hit_distances(origin: np.ndarray, dirs: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """Distance along each ray to the surface it hit (inf on a miss)."""
    ts = np.stack([prim.intersect(origin, dirs) for prim in WORLD]).min(axis=0)
    return np.where(hit >= 0, ts, np.inf)


def generate_large_scene(out_dir: Path, *, views: int = 200, width: int = 1000, height: int = 667,
                         points: int = 300_000, noise: float = 0.01, seed: int = 0) -> None:
    """Write the scene to ``out_dir`` (see the module docstring)."""
    out_dir = Path(out_dir)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    focal = 0.5 * width / math.tan(0.5 * CAMERA_ANGLE_X)
    poses = np.stack([look_at_origin(p) for p in camera_positions(views, 0.0)])
    images = []
    for k, c2w in enumerate(poses):
        name = f"view_{k:04d}.jpg"
        Image.fromarray(render_rgb(c2w, width, height, focal)).save(out_dir / "images" / name, quality=95, subsampling=0)
        images.append(ColmapImage.from_viewmat(k + 1, name, 1, np.linalg.inv(c2w @ GL_TO_CV)))
    xyz, rgb = surface_points(poses, width, height, focal, points, noise, np.random.default_rng(seed))
    camera = ColmapCamera(1, "PINHOLE", width, height, (focal, focal, width / 2, height / 2))
    write_model(out_dir / "sparse" / "0", [camera], images, xyz, rgb)


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    from ..console import Console

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--views", type=int, default=200)
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--height", type=int, default=667)
    parser.add_argument("--points", type=int, default=300_000)
    parser.add_argument("--noise", type=float, default=0.01, help="world units (the scene spans about 2.5)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    generate_large_scene(args.out_dir, views=args.views, width=args.width, height=args.height,
                         points=args.points, noise=args.noise, seed=args.seed)
    Console().info(f"wrote {args.views} views and {args.points:,} points to {args.out_dir} "
                   f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
