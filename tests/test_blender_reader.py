"""The NeRF-synthetic (Blender) reader: conventions, errors, and agreement with the demo scene."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from PIL import Image

from splattrain.cameras import Camera
from splattrain.data.blender import load_blender
from splattrain.synthetic.demo_scene import BALL, MARBLE, SCENE, Sphere, trace_rays
from splattrain.errors import DataError

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "demo"
FROM_PLUS_Z = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 4], [0, 0, 0, 1]]  # OpenGL, looks down -z


def _write_image(path: Path, width: int = 8, height: int = 6, mode: str = "RGBA") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (width, height), (10, 20, 30, 40)[: len(mode)]).save(path)


def _write_split(root: Path, split: str, meta: dict[str, Any] | None = None, n: int = 2) -> Path:
    """Write ``transforms_{split}.json`` with ``n`` frames (images included) and return it."""
    if meta is None:
        meta = {"camera_angle_x": 0.7}
        meta["frames"] = [
            {"file_path": f"./{split}/r_{k}", "transform_matrix": FROM_PLUS_Z} for k in range(n)
        ]
        for k in range(n):
            _write_image(root / split / f"r_{k}.png")
    path = root / f"transforms_{split}.json"
    path.write_text(json.dumps(meta))
    return path


def _scene(root: Path) -> Path:
    _write_split(root, "train")
    _write_split(root, "test")
    return root


def _project(camera: Camera, point: np.ndarray) -> np.ndarray:
    """Pixel coordinates (u, v) of a world point."""
    cam = camera.viewmat.double() @ torch.tensor([*point, 1.0], dtype=torch.float64)
    uvw = camera.K.double() @ cam[:3]
    return (uvw[:2] / uvw[2]).numpy()


# --- conventions ---------------------------------------------------------------------------


def test_pose_round_trip_from_plus_z(tmp_path: Path) -> None:
    camera = load_blender(_scene(tmp_path)).train[0].camera
    np.testing.assert_allclose(camera.center.numpy(), [0, 0, 4], atol=1e-6)
    np.testing.assert_allclose(_project(camera, np.zeros(3)), [4.0, 3.0], atol=1e-5)
    right, up = _project(camera, np.array([1.0, 0, 0])), _project(camera, np.array([0, 1.0, 0]))
    assert right[0] > 4.0 and right[1] == pytest.approx(3.0)  # world +x: image right
    assert up[1] < 3.0 and up[0] == pytest.approx(4.0)  # world +y (camera up): image up


def test_demo_cameras_look_at_the_image_centre() -> None:
    scene = load_blender(SHIPPED)
    assert (len(scene.train), len(scene.test)) == (48, 10)
    for frame in scene.train + scene.test:
        np.testing.assert_allclose(_project(frame.camera, np.zeros(3)), [64.0, 64.0], atol=1e-3)


def test_intrinsics_from_camera_angles(tmp_path: Path) -> None:
    _scene(tmp_path)  # 8x6 images
    camera = load_blender(tmp_path).train[0].camera
    focal = 0.5 * 8 / math.tan(0.35)
    expected = [[focal, 0, 4.0], [0, focal, 3.0], [0, 0, 1]]
    np.testing.assert_allclose(camera.K.numpy(), expected, rtol=1e-6)
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    _write_split(tmp_path, "train", {**meta, "camera_angle_y": 0.5})
    camera = load_blender(tmp_path).train[0].camera
    assert camera.K[1, 1].item() == pytest.approx(0.5 * 6 / math.tan(0.25), rel=1e-6)
    assert camera.K[0, 0].item() == pytest.approx(focal, rel=1e-6)


def test_explicit_intrinsics(tmp_path: Path) -> None:
    _scene(tmp_path)
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    del meta["camera_angle_x"]
    meta.update(fl_x=10.0, fl_y=11.0, cx=3.5, cy=2.5, w=8, h=6)
    _write_split(tmp_path, "train", meta)
    camera = load_blender(tmp_path).train[0].camera
    np.testing.assert_allclose(camera.K.numpy(), [[10, 0, 3.5], [0, 11, 2.5], [0, 0, 1]])


def test_images_stay_uint8_and_paths_may_have_extensions(tmp_path: Path) -> None:
    _scene(tmp_path)
    _write_image(tmp_path / "test" / "rgb.png", mode="RGB")
    frame = {"file_path": "./test/rgb.png", "transform_matrix": FROM_PLUS_Z}
    _write_split(tmp_path, "test", {"camera_angle_x": 0.7, "frames": [frame]})
    scene = load_blender(tmp_path)
    rgba, rgb = scene.train[0], scene.test[0]
    assert rgba.image.dtype == np.uint8 and rgba.image.shape == (6, 8, 4)
    assert rgba.image[0, 0].tolist() == [10, 20, 30, 40]  # not composited
    assert rgb.image.shape == (6, 8, 3) and rgb.name == "rgb"
    assert (rgba.name, rgba.camera.name) == ("r_0", "r_0")
    assert scene.points is None and scene.extra["notes"] == []


def test_val_split_stands_in_for_a_missing_test_split(tmp_path: Path) -> None:
    _write_split(tmp_path, "train")
    _write_split(tmp_path, "val", n=3)
    scene = load_blender(tmp_path)
    assert len(scene.test) == 3
    assert "transforms_test.json" in scene.extra["notes"][0]
    assert "transforms_val.json" in scene.extra["notes"][0]


# --- errors: each names the file at fault ----------------------------------------------------


def _set_train(root: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """Apply ``edit`` to the parsed ``transforms_train.json`` and write it back."""
    path = root / "transforms_train.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    return path


def _missing_folder(root: Path) -> tuple[Path, Path]:
    return root / "nowhere", root / "nowhere"


def _missing_train(root: Path) -> tuple[Path, Path]:
    (root / "transforms_train.json").unlink()
    return root, root / "transforms_train.json"


def _missing_test_and_val(root: Path) -> tuple[Path, Path]:
    (root / "transforms_test.json").unlink()
    return root, root / "transforms_test.json"


def _invalid_json(root: Path) -> tuple[Path, Path]:
    path = root / "transforms_train.json"
    path.write_text('{"frames": [')
    return root, path


def _missing_frames(root: Path) -> tuple[Path, Path]:
    return root, _set_train(root, lambda meta: meta.pop("frames"))


def _missing_camera_angle(root: Path) -> tuple[Path, Path]:
    return root, _set_train(root, lambda meta: meta.pop("camera_angle_x"))


def _missing_file_path(root: Path) -> tuple[Path, Path]:
    return root, _set_train(root, lambda meta: meta["frames"][1].pop("file_path"))


def _missing_matrix(root: Path) -> tuple[Path, Path]:
    return root, _set_train(root, lambda meta: meta["frames"][0].pop("transform_matrix"))


def _matrix_not_4x4(root: Path) -> tuple[Path, Path]:
    return root, _set_train(root, lambda meta: meta["frames"][0].update(transform_matrix=[[1, 0]]))


def _matrix_not_finite(root: Path) -> tuple[Path, Path]:
    bad = [row[:] for row in FROM_PLUS_Z]
    bad[1][3] = float("nan")
    return root, _set_train(root, lambda meta: meta["frames"][0].update(transform_matrix=bad))


def _zero_frames(root: Path) -> tuple[Path, Path]:
    return root, _set_train(root, lambda meta: meta.update(frames=[]))


def _image_missing(root: Path) -> tuple[Path, Path]:
    (root / "train" / "r_1.png").unlink()
    return root, root / "train" / "r_1.png"


def _image_unreadable(root: Path) -> tuple[Path, Path]:
    (root / "train" / "r_1.png").write_bytes(b"not a png at all")
    return root, root / "train" / "r_1.png"


def _image_truncated(root: Path) -> tuple[Path, Path]:
    path = root / "train" / "r_0.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (64, 64, 4), dtype=np.uint8)).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return root, path


def _image_sizes_differ(root: Path) -> tuple[Path, Path]:
    _write_image(root / "train" / "r_1.png", width=9)
    return root, root / "train" / "r_1.png"


BROKEN = [
    _missing_folder,
    _missing_train,
    _missing_test_and_val,
    _invalid_json,
    _missing_frames,
    _missing_camera_angle,
    _missing_file_path,
    _missing_matrix,
    _matrix_not_4x4,
    _matrix_not_finite,
    _zero_frames,
    _image_missing,
    _image_unreadable,
    _image_truncated,
    _image_sizes_differ,
]


@pytest.mark.parametrize("breakage", BROKEN, ids=lambda f: f.__name__.lstrip("_"))
def test_data_errors_name_the_file(
    tmp_path: Path, breakage: Callable[[Path], tuple[Path, Path]]
) -> None:
    root, culprit = breakage(_scene(tmp_path))
    with pytest.raises(DataError) as info:
        load_blender(root)
    message = str(info.value)
    assert str(culprit) in message
    assert "\n" not in message


# --- agreement with the generator's ray tracer -----------------------------------------------


def _red_or_yellow(rgb: np.ndarray) -> bool:
    r, g, b = rgb.astype(int)
    return r >= g and b < 0.5 * r


def _magenta_or_violet(rgb: np.ndarray) -> bool:
    r, g, b = rgb.astype(int)
    return g < 0.5 * min(r, b)


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize(
    "sphere, colour_family",
    [
        pytest.param(BALL, _red_or_yellow, id="ball"),
        pytest.param(MARBLE, _magenta_or_violet, id="marble"),
    ],
)
def test_projected_sphere_centre_hits_the_sphere(
    split: str, sphere: Sphere, colour_family: Callable[[np.ndarray], bool]
) -> None:
    frames = getattr(load_blender(SHIPPED), split)
    centre = np.asarray(sphere.center)
    # The view looking most nearly along the sphere's direction sees it unoccluded.
    frame = max(frames, key=lambda f: float(f.camera.center.double().numpy() @ centre))
    u, v = _project(frame.camera, centre)
    pixel = frame.image[int(v), int(u)]
    assert pixel[3] == 255 and colour_family(pixel[:3]), pixel
    # The ray through that pixel's centre, built from the reader's camera, hits the sphere.
    K, viewmat = frame.camera.K.double().numpy(), frame.camera.viewmat.double().numpy()
    ray_cam = np.linalg.solve(K, [math.floor(u) + 0.5, math.floor(v) + 0.5, 1.0])
    ray = viewmat[:3, :3].T @ ray_cam
    _, hit = trace_rays(frame.camera.center.double().numpy(), (ray / np.linalg.norm(ray))[None])
    assert hit[0] == SCENE.index(sphere)
