"""A small synthetic scene in NeRF-synthetic (Blender) layout, rendered by analytic ray tracing.

The renderer is independent of the splatting code: exact ray-primitive intersection,
Lambertian shading (one directional light plus a soft sky ambient, no shadows) and
3x3 stratified supersampling, with alpha = coverage and straight (unpremultiplied)
colour, as Blender writes it. World axes: z up; the objects stand on a checkered
ground disk at z = -0.35.

Regenerate the shipped scene with ``python -m splattrain.synthetic.demo_scene data/demo``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np
from PIL import Image

from ..console import Console

Vec3 = tuple[float, float, float]

CAMERA_ANGLE_X = 0.69
CAMERA_RADIUS = 4.0
CAMERA_HEIGHTS = (0.12, 0.92)  # range of z / radius: from low oblique views to nearly overhead
GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
SUPERSAMPLE = 3
MATRIX_DECIMALS = 8
LIGHT_DIR = np.array([-0.4, -0.5, 1.0]) / math.sqrt(0.16 + 0.25 + 1.0)
AMBIENT, SKY, DIFFUSE = 0.45, 0.1, 0.55
MIN_T = 1e-9


class Primitive(Protocol):
    """A surface that rays can hit."""

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        """Distance to the first hit ahead of ``origin`` [3] along unit ``dirs`` [N,3], else inf."""
        ...

    def surface(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Outward unit normals [N,3] and albedo [N,3] at hit ``points`` [N,3]."""
        ...


def _ahead(t: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``t`` where it is a valid hit in front of the ray origin, else inf."""
    return np.where(valid & (t > MIN_T), t, np.inf)


def _lerp(a: Vec3, b: Vec3, w: np.ndarray) -> np.ndarray:
    """Per-point blend from colour ``a`` (w=0) to ``b`` (w=1)."""
    w = np.clip(w, 0.0, 1.0)[:, None]
    return np.asarray(a) * (1.0 - w) + np.asarray(b) * w


@dataclass(frozen=True)
class CheckerDisk:
    """A horizontal disk with a checkerboard texture."""

    center: Vec3
    radius: float
    square: float
    color_a: Vec3
    color_b: Vec3

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        c = np.asarray(self.center)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (c[2] - origin[2]) / dirs[:, 2]
            xy = origin[:2] + t[:, None] * dirs[:, :2] - c[:2]
            inside = (xy * xy).sum(axis=1) <= self.radius**2
        return _ahead(t, inside)

    def surface(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cells = np.floor((points[:, :2] - np.asarray(self.center)[:2]) / self.square)
        odd = (cells.sum(axis=1) % 2) == 1
        albedo = np.where(odd[:, None], np.asarray(self.color_b), np.asarray(self.color_a))
        normals = np.broadcast_to(np.array([0.0, 0.0, 1.0]), points.shape)
        return normals, albedo


@dataclass(frozen=True)
class Sphere:
    """A sphere coloured by latitude: alternating bands, or a bottom-to-top gradient."""

    center: Vec3
    radius: float
    top_color: Vec3
    bottom_color: Vec3
    stripes: int = 0  # number of latitude bands; 0 for a smooth gradient

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        oc = origin - np.asarray(self.center)
        b = dirs @ oc
        disc = b * b - (oc @ oc - self.radius**2)
        return _ahead(-b - np.sqrt(np.maximum(disc, 0.0)), disc >= 0.0)

    def surface(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        normals = (points - np.asarray(self.center)) / self.radius
        nz = np.clip(normals[:, 2], -1.0, 1.0)
        if self.stripes:
            band = np.floor(np.arccos(nz) * self.stripes / math.pi) % 2
            return normals, _lerp(self.top_color, self.bottom_color, band)
        return normals, _lerp(self.bottom_color, self.top_color, (nz + 1.0) / 2.0)


@dataclass(frozen=True)
class Box:
    """A box turned by ``yaw`` radians about the vertical axis, one colour per face.

    ``face_colors`` are for the local +x, -x, +y, -y, +z, -z faces.
    """

    center: Vec3
    half_size: Vec3
    yaw: float
    face_colors: tuple[Vec3, Vec3, Vec3, Vec3, Vec3, Vec3]

    def _rotation(self) -> np.ndarray:
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        rot, half = self._rotation(), np.asarray(self.half_size)
        o = (origin - np.asarray(self.center)) @ rot
        d = dirs @ rot
        with np.errstate(divide="ignore", invalid="ignore"):
            t1, t2 = (-half - o) / d, (half - o) / d
        near = np.minimum(t1, t2).max(axis=1)
        far = np.maximum(t1, t2).min(axis=1)
        return _ahead(near, near <= far)

    def surface(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rot = self._rotation()
        ratio = ((points - np.asarray(self.center)) @ rot) / np.asarray(self.half_size)
        axis = np.abs(ratio).argmax(axis=1)
        rows = np.arange(len(points))
        sign = np.sign(ratio[rows, axis])
        local = np.zeros_like(points)
        local[rows, axis] = sign
        face = 2 * axis + (sign < 0)
        return local @ rot.T, np.asarray(self.face_colors)[face]


@dataclass(frozen=True)
class Cylinder:
    """A vertical capped cylinder with a bottom-to-top colour gradient."""

    center: Vec3
    radius: float
    half_height: float
    bottom_color: Vec3
    top_color: Vec3

    def intersect(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        oc = origin - np.asarray(self.center)
        dxy = dirs[:, :2]
        a = (dxy * dxy).sum(axis=1)
        b = dxy @ oc[:2]
        disc = b * b - a * (oc[:2] @ oc[:2] - self.radius**2)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_side = (-b - np.sqrt(np.maximum(disc, 0.0))) / a
            z_side = oc[2] + t_side * dirs[:, 2]
            hits = [_ahead(t_side, (disc >= 0.0) & (np.abs(z_side) <= self.half_height))]
            for z_cap in (self.half_height, -self.half_height):
                t_cap = (z_cap - oc[2]) / dirs[:, 2]
                xy = oc[:2] + t_cap[:, None] * dxy
                hits.append(_ahead(t_cap, (xy * xy).sum(axis=1) <= self.radius**2))
        return np.minimum.reduce(hits)

    def surface(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        local = points - np.asarray(self.center)
        r_xy = np.hypot(local[:, 0], local[:, 1])
        on_cap = self.half_height - np.abs(local[:, 2]) < self.radius - r_xy
        side = np.stack([local[:, 0], local[:, 1], np.zeros(len(points))], axis=1) / self.radius
        cap = np.stack([np.zeros(len(points)), np.zeros(len(points)), np.sign(local[:, 2])], axis=1)
        normals = np.where(on_cap[:, None], cap, side)
        height = (local[:, 2] + self.half_height) / (2.0 * self.half_height)
        return normals, _lerp(self.bottom_color, self.top_color, height)


GROUND = CheckerDisk((0.0, 0.0, -0.35), 1.25, 0.25, (0.92, 0.88, 0.78), (0.25, 0.4, 0.65))
BALL = Sphere((0.3, -0.35, 0.1), 0.45, (0.88, 0.15, 0.1), (0.95, 0.8, 0.15), stripes=8)
BOX = Box(
    (-0.5, 0.25, -0.05),
    (0.28, 0.22, 0.3),
    math.radians(25.0),
    (
        (0.2, 0.4, 0.9),
        (0.6, 0.25, 0.8),
        (0.15, 0.7, 0.7),
        (0.95, 0.45, 0.7),
        (0.55, 0.85, 0.95),
        (0.3, 0.3, 0.3),
    ),
)
PILLAR = Cylinder((0.35, 0.55, 0.05), 0.2, 0.4, (0.1, 0.5, 0.2), (0.6, 0.9, 0.2))
MARBLE = Sphere((-0.45, -0.6, -0.1), 0.25, (0.85, 0.15, 0.65), (0.3, 0.15, 0.8))
SCENE: tuple[Primitive, ...] = (GROUND, BALL, BOX, PILLAR, MARBLE)


def _shade(normals: np.ndarray) -> np.ndarray:
    """Lambertian light from ``LIGHT_DIR`` plus an ambient term brighter for up-facing normals."""
    return AMBIENT + SKY * normals[:, 2] + DIFFUSE * np.maximum(normals @ LIGHT_DIR, 0.0)


def trace_rays(origin: np.ndarray, dirs: np.ndarray, scene: Sequence[Any] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Shade rays from ``origin`` [3] along unit ``dirs`` [N,3] through ``scene`` (default: ``SCENE``).

    Returns (rgb float [N,3] in [0,1], zero on a miss; index into the scene of the
    object hit [N], -1 on a miss).
    """
    scene = scene or SCENE
    origin = np.asarray(origin, dtype=np.float64)
    ts = np.stack([prim.intersect(origin, dirs) for prim in scene])
    nearest = ts.argmin(axis=0)
    t = ts.min(axis=0)
    hit_index = np.where(np.isfinite(t), nearest, -1)
    rgb = np.zeros(dirs.shape)
    for k, prim in enumerate(scene):
        sel = hit_index == k
        if not sel.any():
            continue
        normals, albedo = prim.surface(origin + t[sel, None] * dirs[sel])
        facing_away = (normals * dirs[sel]).sum(axis=1, keepdims=True) > 0.0
        normals = np.where(facing_away, -normals, normals)
        rgb[sel] = np.clip(albedo * _shade(normals)[:, None], 0.0, 1.0)
    return rgb, hit_index


def render_view(c2w_opengl: np.ndarray, width: int, height: int, focal: float) -> np.ndarray:
    """Render uint8 RGBA [H,W,4] for an OpenGL camera-to-world pose (principal point at the centre).

    Each pixel averages ``SUPERSAMPLE``^2 stratified samples: alpha is the covered
    fraction, colour the mean of the covered samples (straight alpha).
    """
    c2w = np.asarray(c2w_opengl, dtype=np.float64)
    s = SUPERSAMPLE
    u, v = np.meshgrid((np.arange(width * s) + 0.5) / s, (np.arange(height * s) + 0.5) / s)
    x, y = (u - width / 2) / focal, (height / 2 - v) / focal
    cam_dirs = np.stack([x, y, -np.ones_like(x)], axis=-1)
    dirs = cam_dirs.reshape(-1, 3) @ c2w[:3, :3].T
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    rgb, hit_index = trace_rays(c2w[:3, 3], dirs)
    covered = (hit_index >= 0).reshape(height, s, width, s).sum(axis=(1, 3))
    rgb_sum = rgb.reshape(height, s, width, s, 3).sum(axis=(1, 3))
    image = np.empty((height, width, 4), dtype=np.uint8)
    image[..., :3] = np.round(rgb_sum / np.maximum(covered, 1)[..., None] * 255.0)
    image[..., 3] = np.round(covered * (255.0 / (s * s)))
    return image


def camera_positions(n: int, phase: float) -> np.ndarray:
    """``n`` camera centres [n,3] on a golden-angle spiral over the upper hemisphere.

    Heights are evenly spaced (even in area on the sphere); ``phase`` turns the spiral so
    that another split lands between the views of the first.
    """
    i = np.arange(n) + 0.5
    low, high = CAMERA_HEIGHTS
    z = low + (high - low) * i / n
    azimuth = (i + phase) * GOLDEN_ANGLE
    ring = np.sqrt(1.0 - z * z)
    return CAMERA_RADIUS * np.stack([ring * np.cos(azimuth), ring * np.sin(azimuth), z], axis=1)


def look_at_origin(position: np.ndarray) -> np.ndarray:
    """OpenGL camera-to-world [4,4] (x right, y up, z back) at ``position``, looking at the origin.

    Rounded to ``MATRIX_DECIMALS`` so the written JSON describes exactly the rendered camera.
    """
    back = position / np.linalg.norm(position)
    right = np.cross([0.0, 0.0, 1.0], back)
    right /= np.linalg.norm(right)
    up = np.cross(back, right)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, up, back, position
    return np.round(c2w, MATRIX_DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0


def _write_split(out_dir: Path, split: str, poses: np.ndarray, size: int) -> None:
    """Render ``poses`` into ``out_dir/split/r_K.png`` and write ``transforms_{split}.json``."""
    focal = 0.5 * size / math.tan(0.5 * CAMERA_ANGLE_X)
    (out_dir / split).mkdir(parents=True, exist_ok=True)
    frames = []
    for k, c2w in enumerate(poses):
        image = render_view(c2w, size, size, focal)
        Image.fromarray(image, "RGBA").save(out_dir / split / f"r_{k}.png")
        frames.append({"file_path": f"./{split}/r_{k}", "transform_matrix": c2w.tolist()})
    doc = {"camera_angle_x": CAMERA_ANGLE_X, "frames": frames}
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    (out_dir / f"transforms_{split}.json").write_text(text, encoding="utf-8")


def generate_demo_scene(
    out_dir: Path, *, size: int = 128, n_train: int = 48, n_test: int = 10
) -> None:
    """Write the demo scene to ``out_dir`` in NeRF-synthetic layout (square ``size`` images)."""
    out_dir = Path(out_dir)
    for split, n, phase in (("train", n_train, 0.0), ("test", n_test, 0.5)):
        poses = np.stack([look_at_origin(p) for p in camera_positions(n, phase)])
        _write_split(out_dir, split, poses, size)


def main(argv: list[str] | None = None) -> None:
    """Command line entry point: regenerate the demo scene into a folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--n-train", type=int, default=48)
    parser.add_argument("--n-test", type=int, default=10)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    generate_demo_scene(args.out_dir, size=args.size, n_train=args.n_train, n_test=args.n_test)
    Console().info(f"wrote the demo scene to {args.out_dir} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()


def depth_map(viewmat: np.ndarray, K: np.ndarray, width: int, height: int) -> np.ndarray:
    """The true depth (along the camera's z axis) of the scene at each pixel centre, float32
    [H, W], 0 where the ray misses; OpenCV camera: world-to-camera ``viewmat`` [4,4], ``K`` [3,3]."""
    viewmat, K = np.asarray(viewmat, dtype=np.float64), np.asarray(K, dtype=np.float64)
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    cam_dirs = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], axis=-1).reshape(-1, 3)
    rotation_c2w = viewmat[:3, :3].T
    origin = -rotation_c2w @ viewmat[:3, 3]
    norms = np.linalg.norm(cam_dirs, axis=1)
    dirs = (cam_dirs / norms[:, None]) @ rotation_c2w.T
    t = np.stack([prim.intersect(origin, dirs) for prim in SCENE]).min(axis=0)
    depth = np.where(np.isfinite(t), t / norms, 0.0)
    return depth.reshape(height, width).astype(np.float32)
