"""The demo scene generator and the shipped ``data/demo`` scene."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image

from splattrain.synthetic.demo_scene import (
    CAMERA_RADIUS,
    camera_positions,
    generate_demo_scene,
    look_at_origin,
    render_view,
)

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "demo"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_shipped_scene_matches_generator(tmp_path: Path) -> None:
    # Exact comparison: the generator is plain float64 numpy with camera matrices rounded
    # to 8 decimals before rendering, so results agree bit for bit unless a value sits
    # within an ulp of a uint8 rounding boundary; none does on the platforms we run.
    generate_demo_scene(tmp_path)
    assert _files(tmp_path) == _files(SHIPPED)
    for name in ("transforms_train.json", "transforms_test.json"):
        assert (tmp_path / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    for name in _files(SHIPPED):
        if name.endswith(".png"):
            fresh = np.asarray(Image.open(tmp_path / name))
            shipped = np.asarray(Image.open(SHIPPED / name))
            assert fresh.shape == shipped.shape == (128, 128, 4), name
            assert np.array_equal(fresh, shipped), name


def test_shipped_scene_is_small() -> None:
    assert sum((SHIPPED / name).stat().st_size for name in _files(SHIPPED)) < 3_000_000


def test_render_view_coverage_and_antialiasing() -> None:
    size = 48
    focal = 0.5 * size / math.tan(0.35)
    image = render_view(look_at_origin(np.array([2.0, -2.0, 2.0])), size, size, focal)
    assert image.dtype == np.uint8 and image.shape == (size, size, 4)
    alpha = image[..., 3]
    assert alpha[size // 2, size // 2] == 255
    assert alpha[0, 0] == 0 and not image[alpha == 0].any()  # background: transparent black
    assert ((alpha > 0) & (alpha < 255)).sum() > size  # soft, supersampled edges
    assert image[alpha == 255][:, :3].mean() > 80  # lit, not too dark


def test_camera_splits_cover_the_upper_hemisphere_and_differ() -> None:
    train, test = camera_positions(48, 0.0), camera_positions(10, 0.5)
    for positions in (train, test):
        np.testing.assert_allclose(np.linalg.norm(positions, axis=1), CAMERA_RADIUS)
        assert (positions[:, 2] > 0).all()
    gaps = np.linalg.norm(test[:, None] - train[None], axis=-1).min(axis=1)
    assert gaps.min() > 0.2


def test_poses_look_at_origin() -> None:
    for position in camera_positions(12, 0.0):
        c2w = look_at_origin(position)
        rotation = c2w[:3, :3]
        np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), atol=1e-7)
        back = rotation[:, 2]
        np.testing.assert_allclose(back, position / CAMERA_RADIUS, atol=1e-7)
        assert rotation[2, 1] > 0  # camera y (up in OpenGL) has a positive world-z part
