"""The nerfstudio reader: transforms.json conventions, intrinsics, distortion, masks, points, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from PIL import Image

from splattrain.cli import main as cli_main
from splattrain.config.schema import DataConfig
from splattrain.synthetic.demo_scene import look_at_origin
from splattrain.data.loading import load_scene
from splattrain.data.nerfstudio import load_nerfstudio
from splattrain.errors import DataError
from test_colmap import DISTORTED, GL_TO_CV, mean_error, noise_image, trace_image, undistort_normalised

SIZE = (24, 16)
INTRINSICS = {"fl_x": 20.0, "fl_y": 21.0, "cx": 12.5, "cy": 7.5, "w": 24, "h": 16}


def c2w_gl(k: int) -> np.ndarray:
    angle = 0.7 * k
    return look_at_origin(np.array([4 * np.cos(angle), 4 * np.sin(angle), 1.0]))


def make_nerfstudio(root: Path, n: int = 3, shared: dict[str, Any] | None = None, **frame_extra: Any) -> Path:
    """Write transforms.json (frames in reverse name order) and ``n`` noise PNGs under ``root/images``."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for k in reversed(range(n)):
        Image.fromarray(noise_image(k)).save(root / "images" / f"frame_{k:05d}.png")
        frames.append({"file_path": f"images/frame_{k:05d}.png", "transform_matrix": c2w_gl(k).tolist(), **frame_extra})
    meta = {"camera_model": "OPENCV", **(INTRINSICS if shared is None else shared), "frames": frames}
    path = root / "transforms.json"
    path.write_text(json.dumps(meta))
    return path


def edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def config(**kwargs: Any) -> DataConfig:
    return DataConfig(**{"path": "", "test_every": 0, **kwargs})


def test_shared_intrinsics_and_opengl_poses(tmp_path: Path) -> None:
    make_nerfstudio(tmp_path)
    kind, scene = load_scene(config(path=str(tmp_path)))
    assert kind == "nerfstudio" and any("detected nerfstudio" in n for n in scene.extra["notes"])
    assert [f.name for f in scene.train] == ["images_frame_00000", "images_frame_00001", "images_frame_00002"]
    _, raw = load_scene(config(path=str(tmp_path), normalize=False))
    for k, frame in enumerate(raw.train):
        np.testing.assert_array_equal(frame.image, noise_image(k))
        np.testing.assert_allclose(frame.camera.K.numpy(), [[20, 0, 12.5], [0, 21, 7.5], [0, 0, 1]])
        np.testing.assert_allclose(frame.camera.viewmat.numpy(), np.linalg.inv(c2w_gl(k) @ GL_TO_CV), atol=1e-6)
        # The camera looks at the world origin: it projects in front of the camera, near the principal point.
        cam = frame.camera.viewmat.double().numpy() @ np.array([0, 0, 0, 1.0])
        assert cam[2] > 0
    assert raw.points is None and any("random points" in n for n in raw.extra["notes"])


def test_per_frame_intrinsics_override_shared_ones(tmp_path: Path) -> None:
    path = make_nerfstudio(tmp_path, shared={"fl_x": 30.0})

    def per_frame(meta: dict[str, Any]) -> None:
        for frame in meta["frames"]:
            k = int(frame["file_path"][-6:-4])
            frame.update(fl_x=10.0 + k, cx=11.0, cy=7.0)

    edit(path, per_frame)
    frames = load_nerfstudio(tmp_path, config()).train
    assert [f.camera.K[0, 0].item() for f in frames] == [10.0, 11.0, 12.0]
    assert [f.camera.K[1, 1].item() for f in frames] == [10.0, 11.0, 12.0]  # fl_y defaults to fl_x
    assert frames[0].camera.K[0, 2].item() == 11.0


def test_split_and_file_paths_without_extension(tmp_path: Path) -> None:
    path = make_nerfstudio(tmp_path, n=10)
    edit(path, lambda meta: meta["frames"][0].update(file_path=meta["frames"][0]["file_path"][:-4]))
    scene = load_nerfstudio(tmp_path, DataConfig(path=str(tmp_path)))
    assert [f.name for f in scene.test] == ["images_frame_00000", "images_frame_00008"] and len(scene.train) == 8


def test_distortion_is_undistorted(tmp_path: Path) -> None:
    size, params = (128, 96), DISTORTED["OPENCV"]
    fx, fy, cx, cy, k1, k2, p1, p2 = params
    c2w = look_at_origin(np.array([0.5, 0.3, 1.4]))
    viewmat = np.linalg.inv(c2w @ GL_TO_CV)
    distorted = trace_image(
        viewmat, size, lambda u, v: undistort_normalised("OPENCV", params, (u - cx) / fx, (v - cy) / fy)
    )
    pinhole = trace_image(viewmat, size, lambda u, v: ((u - cx) / fx, (v - cy) / fy))
    (tmp_path / "images").mkdir()
    Image.fromarray(distorted).save(tmp_path / "images" / "a.png")
    meta = {"fl_x": fx, "fl_y": fy, "cx": cx, "cy": cy, "w": 128, "h": 96, "k1": k1, "k2": k2, "p1": p1, "p2": p2}
    meta["frames"] = [{"file_path": "images/a.png", "transform_matrix": c2w.tolist()}]
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    frame = load_nerfstudio(tmp_path, config()).train[0]
    assert mean_error(distorted, pinhole) > 7.0
    assert mean_error(frame.image, pinhole) < 3.0


def test_fisheye_is_read_and_other_models_rejected(tmp_path: Path) -> None:
    path = make_nerfstudio(tmp_path, shared={**INTRINSICS, "camera_model": "OPENCV_FISHEYE", "k1": 0.05})
    frame = load_nerfstudio(tmp_path, config()).train[0]
    assert frame.mask is None or frame.mask.mean() > 0.5
    assert mean_error(frame.image, noise_image(0)) > 10  # resampled
    edit(path, lambda meta: meta.update(camera_model="EQUIRECTANGULAR"))
    with pytest.raises(DataError, match=r"transforms.json: frame \d: camera_model 'EQUIRECTANGULAR' is not supported"):
        load_nerfstudio(tmp_path, config())


def test_downscaled_image_folder(tmp_path: Path) -> None:
    make_nerfstudio(tmp_path)
    (tmp_path / "images_2").mkdir()
    for k in range(3):
        Image.fromarray(noise_image(50 + k, (12, 8))).save(tmp_path / "images_2" / f"frame_{k:05d}.png")
    scene = load_nerfstudio(tmp_path, config(downscale=2))
    np.testing.assert_array_equal(scene.train[1].image, noise_image(51, (12, 8)))
    np.testing.assert_allclose(scene.train[1].camera.K.numpy(), [[10, 0, 6.25], [0, 10.5, 3.75], [0, 0, 1]])
    assert any("images_2/" in note for note in scene.extra["notes"])


def test_per_frame_masks(tmp_path: Path) -> None:
    path = make_nerfstudio(tmp_path)
    (tmp_path / "masks").mkdir()
    mask = np.zeros(SIZE[::-1], dtype=np.uint8)
    mask[:, :10] = 255
    for k in range(3):
        Image.fromarray(mask).save(tmp_path / "masks" / f"m{k}.png")
    edit(path, lambda meta: [f.update(mask_path=f"masks/m{f['file_path'][-5]}.png") for f in meta["frames"]])
    frames = load_nerfstudio(tmp_path, config()).train
    assert all(f.mask is not None and f.mask.sum() == 160 for f in frames)
    assert load_nerfstudio(tmp_path, config(masks="none")).train[0].mask is None
    edit(path, lambda meta: meta["frames"][1].pop("mask_path"))
    with pytest.raises(DataError, match=r"transforms.json: frame 1 has no mask_path but 2 other frames do"):
        load_nerfstudio(tmp_path, config())


def test_points_from_ply_file(tmp_path: Path) -> None:
    path = make_nerfstudio(tmp_path)
    vertices = np.array(
        [(0.5, 1.0, -2.0, 255, 128, 0), (1.0, 2.0, 3.0, 1, 2, 3)],
        dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")],
    )
    header = "ply\nformat binary_little_endian 1.0\nelement vertex 2\n"
    header += "".join(f"property {t} {n}\n" for t, n in [("float", "x"), ("float", "y"), ("float", "z")])
    header += "".join(f"property uchar {c}\n" for c in ("red", "green", "blue")) + "end_header\n"
    (tmp_path / "sparse_pc.ply").write_bytes(header.encode() + vertices.tobytes())
    edit(path, lambda meta: meta.update(ply_file_path="sparse_pc.ply"))
    scene = load_nerfstudio(tmp_path, config())
    np.testing.assert_allclose(scene.points, [[0.5, 1.0, -2.0], [1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(scene.point_colors, [[255, 128, 0], [1, 2, 3]])


# --- bad input: exit code 2 and one line naming the file, the frame and what to do ------------------


def _missing_image(root: Path) -> str:
    (root / "images" / "frame_00001.png").unlink()
    return r"images/frame_00001.png: image not found \(frame 1 of .*transforms.json\); restore the file"


def _image_twice(root: Path) -> str:
    edit(root / "transforms.json", lambda meta: meta["frames"].append(dict(meta["frames"][0])))
    return r"transforms.json: frames 0 and 3 both use .*frame_00002.png; remove the duplicate frame"


def _unreadable_image(root: Path) -> str:
    (root / "images" / "frame_00000.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    return r"images/frame_00000.png: cannot read image .*frame 2 of .*replace or re-export"


def _nan_pose(root: Path) -> str:
    edit(root / "transforms.json", lambda meta: meta["frames"][1]["transform_matrix"][0].__setitem__(3, float("nan")))
    return r"transforms.json: frame 1: transform_matrix has non-finite values; fix or remove the frame"


def _no_frames(root: Path) -> str:
    edit(root / "transforms.json", lambda meta: meta.update(frames=[]))
    return r"transforms.json: no frames"


def _size_mismatch(root: Path) -> str:
    Image.fromarray(noise_image(1, (30, 16))).save(root / "images" / "frame_00001.png")
    return r"images/frame_00001.png: image is 30x16 but w/h in transforms.json is 24x16 \(frame 1 of"


def _unsupported_model(root: Path) -> str:
    edit(root / "transforms.json", lambda meta: meta.update(camera_model="VR180_L"))
    return r"transforms.json: frame \d: camera_model 'VR180_L' is not supported"


BAD_INPUTS = [
    _missing_image,
    _image_twice,
    _unreadable_image,
    _nan_pose,
    _no_frames,
    _size_mismatch,
    _unsupported_model,
]


@pytest.mark.parametrize("breakage", BAD_INPUTS, ids=lambda f: f.__name__.lstrip("_"))
def test_bad_input_stops_before_training_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, breakage: Callable[[Path], str]
) -> None:
    scene = tmp_path / "scene"
    make_nerfstudio(scene)
    pattern = breakage(scene)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"name: bad\noutput_dir: {tmp_path / 'run'}\ndata:\n  path: {scene}\n")
    assert cli_main(["fit", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert str(scene) in err and re.search(pattern, err), err
    assert not (tmp_path / "run").exists()
