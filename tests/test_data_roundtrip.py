"""Round trip: one ray-traced scene written as Blender, COLMAP (binary, text) and nerfstudio folders
reads back to the cameras it was rendered from and trains to the same PSNR."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.data.colmap_model import ColmapCamera, ColmapImage
from splattrain.data.colmap_write import write_model
from splattrain.synthetic.demo_scene import CAMERA_ANGLE_X, camera_positions, look_at_origin, render_view
from splattrain.data.loading import load_scene
from splattrain.engine import DefaultTrainer

SIZE = 32
FOCAL = 0.5 * SIZE / math.tan(0.5 * CAMERA_ANGLE_X)
TEST_VIEWS = (2, 7, 11, 14)
GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])


@pytest.fixture(scope="module")
def views() -> list[tuple[np.ndarray, np.ndarray]]:
    """16 (OpenGL camera-to-world, RGB uint8 over white) views of the demo scene."""
    out = []
    for position in camera_positions(16, 0.25):
        c2w = look_at_origin(position)
        rgba = render_view(c2w, SIZE, SIZE, FOCAL).astype(np.float64) / 255.0
        rgb = rgba[..., :3] * rgba[..., 3:] + (1.0 - rgba[..., 3:])
        out.append((c2w, np.round(rgb * 255.0).astype(np.uint8)))
    return out


def _save_images(folder: Path, views: list[tuple[np.ndarray, np.ndarray]]) -> None:
    folder.mkdir(parents=True)
    for k, (_, rgb) in enumerate(views):
        Image.fromarray(rgb).save(folder / f"view_{k:02d}.png")


def write_blender(root: Path, views: list) -> None:
    for split, keep in (("train", lambda k: k not in TEST_VIEWS), ("test", lambda k: k in TEST_VIEWS)):
        chosen = [k for k in range(len(views)) if keep(k)]
        (root / split).mkdir(parents=True)
        for k in chosen:
            Image.fromarray(views[k][1]).save(root / split / f"view_{k:02d}.png")
        frames = [{"file_path": f"./{split}/view_{k:02d}", "transform_matrix": views[k][0].tolist()} for k in chosen]
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": CAMERA_ANGLE_X, "frames": frames}))


def write_colmap(root: Path, views: list, binary: bool) -> None:
    _save_images(root / "images", views)
    camera = ColmapCamera(1, "SIMPLE_PINHOLE", SIZE, SIZE, (FOCAL, SIZE / 2, SIZE / 2))
    images = [
        ColmapImage.from_viewmat(k + 1, f"view_{k:02d}.png", 1, np.linalg.inv(c2w @ GL_TO_CV))
        for k, (c2w, _) in enumerate(views)
    ]
    write_model(root / "sparse" / "0", [camera], images, np.zeros((0, 3)), np.zeros((0, 3), dtype=np.uint8), binary)


def write_nerfstudio(root: Path, views: list) -> None:
    _save_images(root / "images", views)
    frames = [
        {"file_path": f"images/view_{k:02d}.png", "transform_matrix": c2w.tolist()} for k, (c2w, _) in enumerate(views)
    ]
    meta = {
        "camera_model": "OPENCV",
        "fl_x": FOCAL,
        "fl_y": FOCAL,
        "cx": SIZE / 2,
        "cy": SIZE / 2,
        "w": SIZE,
        "h": SIZE,
    }
    (root / "transforms.json").write_text(json.dumps({**meta, "frames": frames}))


WRITERS = {
    "blender": write_blender,
    "colmap-bin": lambda root, views: write_colmap(root, views, True),
    "colmap-txt": lambda root, views: write_colmap(root, views, False),
    "nerfstudio": write_nerfstudio,
}
TYPES = {"blender": "blender", "colmap-bin": "colmap", "colmap-txt": "colmap", "nerfstudio": "nerfstudio"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, views: list) -> dict[str, Path]:
    out = {}
    for name, write in WRITERS.items():
        root = tmp_path_factory.mktemp(name)
        write(root, views)
        out[name] = root
    return out


def _config_text(root: Path, run: Path) -> str:
    test_images = ", ".join(f"view_{k:02d}.png" for k in TEST_VIEWS)
    return f"""
name: roundtrip
output_dir: {run}
data:
  path: {root}
  normalize: false
  test_images: [{test_images}]
trainer:
  max_steps: 25
  val_interval: 0
model:
  sh_degree: 0
  init:
    num_points: 400
    extent: 1.2
strategy:
  refine_start_iter: 1000
metrics:
  lpips: false
writers: []
"""


@pytest.mark.parametrize("name", list(WRITERS))
def test_every_format_reads_back_the_rendered_cameras(folders: dict[str, Path], views: list, name: str) -> None:
    cfg = load_config(_write(folders[name].parent / f"{name}.yaml", _config_text(folders[name], folders[name] / "run")))
    kind, scene = load_scene(cfg.data)
    assert kind == TYPES[name]
    assert [int(f.name[-2:]) for f in scene.test] == list(TEST_VIEWS)
    assert [int(f.name[-2:]) for f in scene.train] == [k for k in range(16) if k not in TEST_VIEWS]
    for frame in scene.train + scene.test:
        c2w, rgb = views[int(frame.name[-2:])]
        np.testing.assert_array_equal(frame.image, rgb)
        np.testing.assert_allclose(frame.camera.viewmat.numpy(), np.linalg.inv(c2w @ GL_TO_CV), atol=2e-6)
        np.testing.assert_allclose(
            frame.camera.K.numpy(), [[FOCAL, 0, SIZE / 2], [0, FOCAL, SIZE / 2], [0, 0, 1]], rtol=1e-6
        )


def _scene(folders: dict[str, Path], name: str):
    cfg = load_config(_write(folders[name].parent / f"{name}.yaml", _config_text(folders[name], folders[name] / "run")))
    return load_scene(cfg.data)[1]


def test_colmap_text_and_binary_give_identical_frames(folders: dict[str, Path]) -> None:
    binary, text = _scene(folders, "colmap-bin"), _scene(folders, "colmap-txt")
    for a, b in zip(binary.train + binary.test, text.train + text.test):
        assert a.name == b.name and np.array_equal(a.image, b.image)
        assert torch.equal(a.camera.viewmat, b.camera.viewmat) and torch.equal(a.camera.K, b.camera.K)


def test_every_format_trains_to_the_same_psnr(folders: dict[str, Path]) -> None:
    """Blender, COLMAP and nerfstudio copies of one scene train to the same PSNR (COLMAP text gives the
    very frames of COLMAP binary, checked above, so it trains identically)."""
    psnrs = {}
    for name in ("blender", "colmap-bin", "nerfstudio"):
        root = folders[name]
        path = _write(root.parent / f"{name}-train.yaml", _config_text(root, root.parent / f"{name}-run"))
        results = DefaultTrainer(load_config(path), console=Console(quiet=True)).train()
        psnrs[name] = results["psnr"]
    assert psnrs["blender"] > 12.0, psnrs
    for value in psnrs.values():
        assert value == pytest.approx(psnrs["blender"], abs=0.01), psnrs


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
