"""The COLMAP reader: model files, camera models and undistortion, images_N, splits, points, masks, errors."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
from PIL import Image

from splattrain.cli import main as cli_main
from splattrain.config.schema import DataConfig
from splattrain.data.colmap import load_colmap
from splattrain.data.colmap_model import ColmapCamera, ColmapImage, read_model
from splattrain.data.colmap_write import write_model
from splattrain.synthetic.demo_scene import look_at_origin, trace_rays
from splattrain.data.distortion import Distortion, Undistorter
from splattrain.data.loading import load_scene
from splattrain.errors import DataError

GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])
SIZE = (24, 16)
#: Parameters per model for a 24x16 camera: f ~ 20 px, principal point off-centre, mild distortion.
PARAMS = {
    "SIMPLE_PINHOLE": (20.0, 12.5, 7.5),
    "PINHOLE": (20.0, 21.0, 12.5, 7.5),
    "SIMPLE_RADIAL": (20.0, 12.5, 7.5, -0.12),
    "RADIAL": (20.0, 12.5, 7.5, -0.1, 0.03),
    "OPENCV": (20.0, 21.0, 12.5, 7.5, -0.1, 0.02, 0.004, -0.003),
    "FULL_OPENCV": (20.0, 21.0, 12.5, 7.5, -0.1, 0.02, 0.004, -0.003, 0.01, 0.02, -0.01, 0.005),
    "OPENCV_FISHEYE": (20.0, 21.0, 12.5, 7.5, 0.05, -0.02, 0.01, -0.004),
}
#: (fx, fy, cx, cy) of each model's parameters.
PINHOLE_PART = {m: (p[0], p[0], p[1], p[2]) if m.startswith(("SIMPLE", "RADIAL")) else p[:4] for m, p in PARAMS.items()}


def camera_viewmats(n: int, radius: float = 4.0) -> list[np.ndarray]:
    """OpenCV world-to-camera matrices of ``n`` cameras around the origin, looking at it."""
    views = []
    for k in range(n):
        angle = 2 * math.pi * k / n
        position = np.array([radius * math.cos(angle), radius * math.sin(angle), 1.5])
        views.append(np.linalg.inv(look_at_origin(position) @ GL_TO_CV))
    return views


def noise_image(seed: int, size: tuple[int, int] = SIZE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)


def make_colmap(
    root: Path,
    *,
    model: str = "PINHOLE",
    n: int = 3,
    binary: bool = True,
    points: bool = True,
    sparse: str = "sparse/0",
    size: tuple[int, int] = SIZE,
    images: Optional[list[np.ndarray]] = None,
) -> list[np.ndarray]:
    """Write a COLMAP scene of ``n`` noise images (img_00.png, ...) under ``root``; returns the viewmats."""
    viewmats = camera_viewmats(n)
    (root / "images").mkdir(parents=True, exist_ok=True)
    for k in range(n):
        pixels = images[k] if images is not None else noise_image(k, size)
        Image.fromarray(pixels).save(root / "images" / f"img_{k:02d}.png")
    params = (
        PARAMS[model]
        if size == SIZE
        else tuple(v * size[0] / SIZE[0] if i < 4 else v for i, v in enumerate(PARAMS[model]))
    )
    cameras = [ColmapCamera(1, model, size[0], size[1], params)]
    entries = [ColmapImage.from_viewmat(k + 10, f"img_{k:02d}.png", 1, v) for k, v in enumerate(viewmats)]
    xyz = np.array([[0.1, 0.2, 0.3], [-1.0, 0.5, 0.25]]) if points else np.zeros((0, 3))
    rgb = np.array([[255, 0, 10], [1, 2, 3]], dtype=np.uint8) if points else np.zeros((0, 3), dtype=np.uint8)
    write_model(root / sparse, cameras, entries[::-1], xyz, rgb, binary=binary)
    return viewmats


def config(**kwargs) -> DataConfig:
    return DataConfig(**{"path": "", "test_every": 0, **kwargs})


# --- the model files ----------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["bin", "txt"])
def test_reads_what_pycolmap_writes(tmp_path: Path, binary: bool) -> None:
    pycolmap = pytest.importorskip("pycolmap")
    rec = pycolmap.Reconstruction()
    for camera_id, model in enumerate(PARAMS, start=1):
        camera = pycolmap.Camera(model=model, width=24, height=16, params=list(PARAMS[model]), camera_id=camera_id)
        rec.add_camera_with_trivial_rig(camera)
    rng = np.random.default_rng(0)
    for image_id in range(1, 6):
        q = rng.normal(size=4)
        pose = pycolmap.Rigid3d(pycolmap.Rotation3d(q / np.linalg.norm(q)), rng.normal(size=3))
        image = pycolmap.Image(name=f"sub/im {image_id}.jpg", camera_id=1 + image_id % len(PARAMS), image_id=image_id)
        rec.add_image_with_trivial_frame(image, pose)
    for _ in range(4):
        rec.add_point3D(rng.normal(size=3), pycolmap.Track(), rng.integers(0, 256, 3).astype(np.uint8))
    (rec.write_binary if binary else rec.write_text)(str(tmp_path))

    model = read_model(tmp_path)
    assert {c.id: (c.model, c.width, c.height) for c in model.cameras.values()} == {
        i: (m, 24, 16) for i, m in enumerate(PARAMS, start=1)
    }
    for camera in model.cameras.values():
        np.testing.assert_allclose(camera.params, PARAMS[camera.model], rtol=1e-12)
    assert sorted(i.name for i in model.images) == [f"sub/im {k}.jpg" for k in range(1, 6)]
    for image in model.images:
        expected = rec.images[image.id].cam_from_world().matrix()
        np.testing.assert_allclose(image.viewmat()[:3], expected, atol=1e-12)
        assert image.camera_id == rec.images[image.id].camera_id
    order = np.argsort([p.xyz[0] for p in rec.points3D.values()])
    np.testing.assert_allclose(np.sort(model.points[:, 0]), np.array([p.xyz[0] for p in rec.points3D.values()])[order])
    assert sorted(map(tuple, model.colors.tolist())) == sorted(tuple(p.color.tolist()) for p in rec.points3D.values())


@pytest.mark.parametrize("binary", [True, False], ids=["bin", "txt"])
@pytest.mark.parametrize("model", ["SIMPLE_PINHOLE", "PINHOLE"])
def test_pinhole_cameras_keep_pixels_poses_and_intrinsics(tmp_path: Path, model: str, binary: bool) -> None:
    viewmats = make_colmap(tmp_path, model=model, binary=binary)
    scene = load_colmap(tmp_path, config())
    assert [f.name for f in scene.train] == ["img_00", "img_01", "img_02"] and scene.test == []
    fx, fy, cx, cy = PINHOLE_PART[model]
    for k, frame in enumerate(scene.train):
        np.testing.assert_array_equal(frame.image, noise_image(k))
        assert frame.image.dtype == np.uint8 and frame.mask is None
        np.testing.assert_allclose(frame.camera.viewmat.numpy(), viewmats[k], atol=1e-6)
        np.testing.assert_allclose(frame.camera.K.numpy(), [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], rtol=1e-6)
        assert (frame.camera.width, frame.camera.height) == SIZE
        np.testing.assert_allclose(frame.camera.center.numpy(), np.linalg.inv(viewmats[k])[:3, 3], atol=1e-5)
    np.testing.assert_allclose(scene.points, [[0.1, 0.2, 0.3], [-1.0, 0.5, 0.25]], rtol=1e-6)
    np.testing.assert_array_equal(scene.point_colors, [[255, 0, 10], [1, 2, 3]])


def test_model_directly_in_sparse_and_scene_without_points(tmp_path: Path) -> None:
    make_colmap(tmp_path, sparse="sparse", points=False, binary=False)
    kind, scene = load_scene(config(path=str(tmp_path), type="auto"))
    assert kind == "colmap" and scene.points is None and len(scene.train) == 3
    assert any("detected colmap" in note for note in scene.extra["notes"])
    assert any("random points" in note for note in scene.extra["notes"])


def test_unregistered_images_are_reported(tmp_path: Path) -> None:
    make_colmap(tmp_path)
    Image.fromarray(noise_image(9)).save(tmp_path / "images" / "lost.png")
    scene = load_colmap(tmp_path, config())
    assert len(scene.train) == 3
    assert any("1 of 4 files" in note and "not registered" in note for note in scene.extra["notes"])


@pytest.mark.parametrize(
    "binary, edit, message",
    [
        (
            True,
            lambda d: (d / "cameras.bin").write_bytes((d / "cameras.bin").read_bytes() + b"\0"),
            r"1 unexpected bytes",
        ),
        (
            False,
            lambda d: (d / "cameras.txt").write_text("1 PINHOLE 24 16 20 20 12\n"),
            r"line 1: .*needs 4 parameters",
        ),
        (False, lambda d: (d / "cameras.txt").write_text("1 FANCY 24 16 20\n"), r"line 1: camera 1 has unknown model"),
        (False, lambda d: (d / "images.txt").write_text("1 1 0 0 0 x 0 0 1 a.png\n\n"), r"line 1: the pose must be"),
        (
            False,
            lambda d: (d / "cameras.txt").write_text("1 PINHOLE 24 16 20 20 12 8\n1 PINHOLE 24 16 20 20 12 8\n"),
            r"cameras.txt line 2: camera 1 is defined twice",
        ),
    ],
)
def test_model_file_errors_name_file_and_line(tmp_path: Path, binary: bool, edit: Callable, message: str) -> None:
    make_colmap(tmp_path, binary=binary)
    edit(tmp_path / "sparse" / "0")
    with pytest.raises(DataError, match=message):
        read_model(tmp_path / "sparse" / "0")


# --- distortion -----------------------------------------------------------------------------------


def colmap_distort(
    model: str, params: tuple[float, ...], u: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Distorted normalised coordinates, transcribed from COLMAP's camera_models.h (independent of splattrain)."""
    p = params
    if model == "SIMPLE_RADIAL":
        r2 = u * u + v * v
        return u + u * p[3] * r2, v + v * p[3] * r2
    if model == "RADIAL":
        r2 = u * u + v * v
        radial = p[3] * r2 + p[4] * r2 * r2
        return u + u * radial, v + v * radial
    if model == "OPENCV":
        k1, k2, p1, p2 = p[4:8]
        u2, v2, uv = u * u, v * v, u * v
        r2 = u2 + v2
        radial = k1 * r2 + k2 * r2 * r2
        return u + u * radial + 2 * p1 * uv + p2 * (r2 + 2 * u2), v + v * radial + 2 * p2 * uv + p1 * (r2 + 2 * v2)
    if model == "FULL_OPENCV":
        k1, k2, p1, p2, k3, k4, k5, k6 = p[4:12]
        u2, v2, uv = u * u, v * v, u * v
        r2 = u2 + v2
        r4, r6 = r2 * r2, r2 * r2 * r2
        radial = (1 + k1 * r2 + k2 * r4 + k3 * r6) / (1 + k4 * r2 + k5 * r4 + k6 * r6)
        return u * radial + 2 * p1 * uv + p2 * (r2 + 2 * u2), v * radial + 2 * p2 * uv + p1 * (r2 + 2 * v2)
    if model == "OPENCV_FISHEYE":
        k1, k2, k3, k4 = p[4:8]
        r = np.sqrt(u * u + v * v)
        theta = np.arctan(r)
        t2 = theta * theta
        thetad = theta * (1 + k1 * t2 + k2 * t2**2 + k3 * t2**3 + k4 * t2**4)
        return u * thetad / r, v * thetad / r
    raise AssertionError(model)


def trace_image(viewmat: np.ndarray, size: tuple[int, int], ray_of_pixel: Callable) -> np.ndarray:
    """Ray-trace the demo scene (2x2 supersampled) with camera-space rays from ``ray_of_pixel(u, v)``."""
    s = 2
    u, v = np.meshgrid((np.arange(size[0] * s) + 0.5) / s, (np.arange(size[1] * s) + 0.5) / s)
    x, y = ray_of_pixel(u.ravel(), v.ravel())
    dirs = np.stack([x, y, np.ones_like(x)], axis=1) @ viewmat[:3, :3]  # camera -> world: R^T d
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    rgb, hit = trace_rays(np.linalg.inv(viewmat)[:3, 3], dirs)
    rgb[hit < 0] = 1.0
    image = rgb.reshape(size[1], s, size[0], s, 3).mean(axis=(1, 3))
    return np.round(image * 255).astype(np.uint8)


def undistort_normalised(model: str, params: tuple[float, ...], xd: np.ndarray, yd: np.ndarray) -> tuple:
    """Invert ``colmap_distort`` by fixed-point iteration."""
    x, y = xd.copy(), yd.copy()
    for _ in range(100):
        dx, dy = colmap_distort(model, params, x, y)
        x, y = x + (xd - dx), y + (yd - dy)
    return x, y


#: Stronger distortions for a 128x96 camera with f = 100 px (corners move by several pixels).
DISTORTED = {
    "SIMPLE_RADIAL": (100.0, 64.5, 47.5, -0.15),
    "RADIAL": (100.0, 64.5, 47.5, -0.12, 0.02),
    "OPENCV": (100.0, 104.0, 64.5, 47.5, -0.12, 0.02, 0.01, -0.008),
    "FULL_OPENCV": (100.0, 104.0, 64.5, 47.5, -0.1, 0.02, 0.01, -0.008, 0.01, 0.1, 0.02, 0.0),
    "OPENCV_FISHEYE": (100.0, 104.0, 64.5, 47.5, 0.05, -0.02, 0.01, -0.004),
}


def write_distorted_scene(root: Path, model: str, binary: bool) -> tuple[np.ndarray, np.ndarray, tuple]:
    """A one-view COLMAP scene ray-traced through a distorted 128x96 camera.

    Returns (distorted image, the same view through the pinhole camera, (fx, fy, cx, cy)).
    """
    size, params = (128, 96), DISTORTED[model]
    fx, fy, cx, cy = (params[0], params[0], params[1], params[2]) if model.endswith("RADIAL") else params[:4]
    viewmat = np.linalg.inv(look_at_origin(np.array([0.5, 0.3, 1.4])) @ GL_TO_CV)  # the view is full of texture

    def distorted_ray(u: np.ndarray, v: np.ndarray) -> tuple:
        return undistort_normalised(model, params, (u - cx) / fx, (v - cy) / fy)

    distorted = trace_image(viewmat, size, distorted_ray)
    pinhole = trace_image(viewmat, size, lambda u, v: ((u - cx) / fx, (v - cy) / fy))
    (root / "images").mkdir()
    Image.fromarray(distorted).save(root / "images" / "view.png")
    camera = ColmapCamera(1, model, *size, params)
    image = ColmapImage.from_viewmat(1, "view.png", 1, viewmat)
    write_model(root / "sparse" / "0", [camera], [image], np.zeros((0, 3)), np.zeros((0, 3), dtype=np.uint8), binary)
    return distorted, pinhole, (fx, fy, cx, cy)


def mean_error(image: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(image.astype(float) - reference.astype(float)).mean())


@pytest.mark.parametrize("binary", [True, False], ids=["bin", "txt"])
@pytest.mark.parametrize("model", list(DISTORTED))
def test_distorted_cameras_are_undistorted_to_their_pinhole(tmp_path: Path, model: str, binary: bool) -> None:
    distorted, pinhole, (fx, fy, cx, cy) = write_distorted_scene(tmp_path, model, binary)
    frame = load_colmap(tmp_path, config()).train[0]
    np.testing.assert_allclose(frame.camera.K.numpy(), [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], rtol=1e-6)
    assert frame.mask is None  # barrel distortion: every pinhole pixel has a source pixel
    assert mean_error(distorted, pinhole) > 7.0
    assert mean_error(frame.image, pinhole) < 3.0  # what is left: bilinear resampling of sharp edges


def test_downscaled_distorted_views_are_undistorted_at_their_size(tmp_path: Path) -> None:
    distorted, pinhole, (fx, fy, cx, cy) = write_distorted_scene(tmp_path, "OPENCV", True)
    frame = load_colmap(tmp_path, config(downscale=2)).train[0]
    np.testing.assert_allclose(frame.camera.K.numpy(), [[fx / 2, 0, cx / 2], [0, fy / 2, cy / 2], [0, 0, 1]], rtol=1e-6)
    half = np.asarray(Image.fromarray(pinhole).resize((64, 48), Image.Resampling.BOX))
    raw = np.asarray(Image.fromarray(distorted).resize((64, 48), Image.Resampling.BOX))
    assert mean_error(frame.image, half) < 0.5 * mean_error(raw, half)


def test_pixels_without_a_source_are_masked_out() -> None:
    K = np.array([[20.0, 0, 12.0], [0, 20.0, 8.0], [0, 0, 1]])
    undistorter = Undistorter(K, Distortion(radial=(0.4,)), 24, 16)  # pincushion: corners fall outside
    assert not undistorter.valid[0, 0] and not undistorter.valid[-1, -1] and undistorter.valid[8, 12]
    image = np.full((16, 24, 3), 200, dtype=np.uint8)
    np.testing.assert_array_equal(undistorter.image(image), image)  # flat stays flat, edges clamp
    mask = np.ones((16, 24), dtype=bool)
    np.testing.assert_array_equal(undistorter.mask(mask), undistorter.valid)


def test_unsupported_camera_model_is_rejected_by_name(tmp_path: Path) -> None:
    make_colmap(tmp_path)
    path = tmp_path / "sparse" / "0" / "cameras.bin"
    model = read_model(path.parent)
    write_model(
        path.parent,
        [ColmapCamera(1, "FOV", 24, 16, (20.0, 20.0, 12.0, 8.0, 0.9))],
        model.images,
        model.points,
        model.colors,
    )
    with pytest.raises(DataError, match=r"camera 1 uses the FOV model.*colmap image_undistorter"):
        load_colmap(tmp_path, config())


# --- image folders and sizes ------------------------------------------------------------------


def test_images_n_folder_is_used_when_downscale_matches(tmp_path: Path) -> None:
    make_colmap(tmp_path, model="PINHOLE", size=(40, 30))
    (tmp_path / "images_2").mkdir()
    for k in range(3):
        Image.fromarray(noise_image(100 + k, (20, 15))).save(tmp_path / "images_2" / f"img_{k:02d}.png")
    scene = load_colmap(tmp_path, config(downscale=2))
    frame = scene.train[0]
    np.testing.assert_array_equal(frame.image, noise_image(100, (20, 15)))
    fx, fy, cx, cy = (v * 40 / 24 for v in PARAMS["PINHOLE"][:4])
    np.testing.assert_allclose(frame.camera.K.numpy(), [[fx / 2, 0, cx / 2], [0, fy / 2, cy / 2], [0, 0, 1]], rtol=1e-6)
    assert (frame.camera.width, frame.camera.height) == (20, 15)
    assert any("images_2/" in note for note in scene.extra["notes"])


@pytest.mark.parametrize("downscale, expected", [(4.0, (10, 8)), (1.5, (27, 21)), (3.0, (14, 10))])
def test_downscale_without_folder_resizes_and_scales_intrinsics_per_axis(
    tmp_path: Path, downscale: float, expected: tuple[int, int]
) -> None:
    make_colmap(tmp_path, model="PINHOLE", size=(41, 31))
    frame = load_colmap(tmp_path, config(downscale=downscale)).train[0]
    assert frame.image.shape == (expected[1], expected[0], 3)
    assert (frame.camera.width, frame.camera.height) == expected
    fx, fy, cx, cy = (v * 41 / 24 for v in PARAMS["PINHOLE"][:4])
    sx, sy = expected[0] / 41, expected[1] / 31
    np.testing.assert_allclose(
        frame.camera.K.numpy(), [[fx * sx, 0, cx * sx], [0, fy * sy, cy * sy], [0, 0, 1]], rtol=1e-6
    )
    # A box filter: the mean colour survives the resize.
    np.testing.assert_allclose(frame.image.mean(), noise_image(0, (41, 31)).mean(), atol=2.0)


def test_images_n_of_the_wrong_size_is_an_error(tmp_path: Path) -> None:
    make_colmap(tmp_path, size=(40, 30))
    (tmp_path / "images_2").mkdir()
    for k in range(3):
        Image.fromarray(noise_image(k, (13, 15) if k == 1 else (20, 15))).save(
            tmp_path / "images_2" / f"img_{k:02d}.png"
        )
    with pytest.raises(DataError, match=r"images_2/img_01.png: image is 13x15 .* about 20x15 .*regenerate images_2/"):
        load_colmap(tmp_path, config(downscale=2))


# --- splits, masks, normalisation -----------------------------------------------------------------


def test_every_eighth_image_is_held_out_by_default(tmp_path: Path) -> None:
    make_colmap(tmp_path, n=17, points=False)
    scene = load_colmap(tmp_path, DataConfig(path=str(tmp_path)))
    assert [f.name for f in scene.test] == ["img_00", "img_08", "img_16"]
    assert len(scene.train) == 14
    scene = load_colmap(tmp_path, config(test_every=5))
    assert [f.name for f in scene.test] == ["img_00", "img_05", "img_10", "img_15"]
    scene = load_colmap(tmp_path, config(test_images=["img_03.png", "img_04"]))
    assert [f.name for f in scene.test] == ["img_03", "img_04"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"test_images": ["nope.png"]}, r"data.test_images: 'nope.png' is not an image of .*images.bin"),
        ({"test_every": 1}, r"all 3 images would be test views"),
    ],
)
def test_split_errors(tmp_path: Path, kwargs: dict, message: str) -> None:
    make_colmap(tmp_path)
    with pytest.raises(DataError, match=message):
        load_colmap(tmp_path, config(**kwargs))


def test_masks_folder_in_colmap_naming(tmp_path: Path) -> None:
    make_colmap(tmp_path)
    (tmp_path / "masks").mkdir()
    for k in range(3):
        mask = np.full(SIZE[::-1], 255, dtype=np.uint8)
        mask[:, : 4 + k] = 0
        Image.fromarray(mask).save(tmp_path / "masks" / f"img_{k:02d}.png.png")
    scene = load_colmap(tmp_path, config())
    assert [int((~f.mask).sum(axis=0)[0]) for f in scene.train] == [16, 16, 16]
    assert [int((~f.mask).sum()) for f in scene.train] == [64, 80, 96]
    assert load_colmap(tmp_path, config(masks="none")).train[0].mask is None
    (tmp_path / "masks" / "img_01.png.png").unlink()
    with pytest.raises(DataError, match=r"masks/img_01.png.png: mask not found .*image 'img_01.png'"):
        load_colmap(tmp_path, config())


def test_normalisation_centres_and_scales_cameras_and_is_recorded(tmp_path: Path) -> None:
    make_colmap(tmp_path, n=6)
    original = load_colmap(tmp_path, config())
    _, scene = load_scene(config(path=str(tmp_path), type="colmap"))
    centers = np.stack([f.camera.center.numpy() for f in scene.train])
    np.testing.assert_allclose(centers.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(centers, axis=1).max(), 1.0, rtol=1e-5)
    T = scene.extra["world_transform"]
    assert T.shape == (4, 4) and not np.allclose(T, np.eye(4))
    for before, after in zip(original.train, scene.train):
        np.testing.assert_allclose(
            (T @ np.append(before.camera.center.numpy(), 1))[:3], after.camera.center.numpy(), atol=1e-5
        )
        for point, moved in zip(original.points, scene.points):
            p0 = before.camera.K.numpy() @ (before.camera.viewmat.numpy() @ np.append(point, 1))[:3]
            p1 = after.camera.K.numpy() @ (after.camera.viewmat.numpy() @ np.append(moved, 1))[:3]
            np.testing.assert_allclose(p0[:2] / p0[2], p1[:2] / p1[2], atol=1e-3)
    _, kept = load_scene(config(path=str(tmp_path), type="colmap", normalize=False))
    np.testing.assert_array_equal(kept.extra["world_transform"], np.eye(4))


# --- bad input: exit code 2, one line naming the file, the image or camera, and what to do ---------


def _drop_image(root: Path) -> str:
    (root / "images" / "img_01.png").unlink()
    return r"images/img_01.png: image not found \(image 'img_01.png' \(id 11\) in .*images.bin\); restore the file"


def _duplicate_image(root: Path) -> str:
    model = read_model(root / "sparse" / "0")
    images = model.images + [ColmapImage(99, "img_00.png", 1, (1.0, 0, 0, 0), (0, 0, 4.0))]
    write_model(root / "sparse" / "0", list(model.cameras.values()), images, model.points, model.colors)
    return r"images.bin: image 'img_00.png' is listed twice \(ids 10 and 99\); remove the duplicate"


def _unreadable_image(root: Path) -> str:
    (root / "images" / "img_02.png").write_bytes(b"this is not a png")
    return r"images/img_02.png: cannot read image .*image 'img_02.png' \(id 12\).*replace or re-export"


def _truncated_image(root: Path) -> str:
    path = root / "images" / "img_00.png"
    Image.fromarray(noise_image(0, (64, 64))).save(path)
    path.write_bytes(path.read_bytes()[:300])
    return r"images/img_00.png: cannot read image .*image 'img_00.png'"


def _missing_camera(root: Path) -> str:
    model = read_model(root / "sparse" / "0")
    model.images[1] = ColmapImage(
        model.images[1].id, model.images[1].name, 7, model.images[1].qvec, model.images[1].tvec
    )
    write_model(
        root / "sparse" / "0", list(model.cameras.values()), model.images, model.points, model.colors, binary=False
    )
    for name in ("cameras", "images", "points3D"):
        (root / "sparse" / "0" / f"{name}.bin").unlink()
    return r"images.txt: image 'img_01.png' \(id 11\) uses camera 7, which cameras.txt does not define"


def _no_images(root: Path) -> str:
    model = read_model(root / "sparse" / "0")
    write_model(root / "sparse" / "0", list(model.cameras.values()), [], model.points, model.colors)
    return r"images.bin: no registered images; .*re-run"


def _unsupported_model(root: Path) -> str:
    model = read_model(root / "sparse" / "0")
    cameras = [ColmapCamera(1, "THIN_PRISM_FISHEYE", 24, 16, (20.0,) * 12)]
    write_model(root / "sparse" / "0", cameras, model.images, model.points, model.colors)
    return r"cameras.bin: camera 1 uses the THIN_PRISM_FISHEYE model.*colmap image_undistorter"


def _inconsistent_size(root: Path) -> str:
    Image.fromarray(noise_image(1, (25, 16))).save(root / "images" / "img_01.png")
    return (
        r"images/img_01.png: image is 25x16 but camera 1 in .*cameras.bin is 24x16 \(image 'img_01.png'"
        r".*give it a camera of its own"
    )


def _nan_pose(root: Path) -> str:
    model = read_model(root / "sparse" / "0")
    bad = model.images[0]
    model.images[0] = ColmapImage(bad.id, bad.name, 1, bad.qvec, (float("nan"), 0.0, 0.0))
    write_model(root / "sparse" / "0", list(model.cameras.values()), model.images, model.points, model.colors)
    return rf"images.bin: image '{bad.name}' \(id {bad.id}\) has a non-finite pose.*re-run COLMAP"


def _nan_pose_text(root: Path) -> str:
    shutil.rmtree(root / "sparse")
    make_colmap(root, binary=False)
    path = root / "sparse" / "0" / "images.txt"
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    fields = lines[first].split()
    fields[5] = "nan"
    lines[first] = " ".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return rf"images.txt: image '{fields[9]}' \(id {fields[0]}\) has a non-finite pose"


def _truncated_model(root: Path) -> str:
    path = root / "sparse" / "0" / "images.bin"
    path.write_bytes(path.read_bytes()[:-30])
    return r"images.bin: file ends inside .* \(truncated"


BAD_INPUTS = [
    _drop_image,
    _duplicate_image,
    _unreadable_image,
    _truncated_image,
    _missing_camera,
    _no_images,
    _unsupported_model,
    _inconsistent_size,
    _nan_pose,
    _nan_pose_text,
    _truncated_model,
]


@pytest.mark.parametrize("breakage", BAD_INPUTS, ids=lambda f: f.__name__.lstrip("_"))
def test_bad_input_stops_before_training_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, breakage: Callable[[Path], str]
) -> None:
    scene = tmp_path / "scene"
    make_colmap(scene)
    pattern = breakage(scene)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"name: bad\noutput_dir: {tmp_path / 'run'}\ndata:\n  path: {scene}\n  test_every: 0\n")
    assert cli_main(["fit", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert str(scene) in err
    assert re.search(pattern, err), err
    assert not (tmp_path / "run").exists()
