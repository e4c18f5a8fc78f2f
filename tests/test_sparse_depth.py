"""Depth maps of the sparse points each photo observed (``data.depths: sparse``): COLMAP tracks read
and written, the maps' values, their shrinking, and the depth term trained on them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SHARED, needs_shared
from splattrain.cameras import Camera
from splattrain.config.schema import DataConfig
from splattrain.console import Console
from splattrain.data.colmap_model import ColmapCamera, ColmapImage, read_model
from splattrain.data.colmap_write import write_model
from splattrain.data.depths import shrink_depth, sparse_depth
from splattrain.data.loading import load_scene
from splattrain.data.views import downscaled_frame
from splattrain.engine import DefaultTrainer, load_config
from splattrain.errors import DataError
from splattrain.synthetic.capture_variants import write_variants

CUP = SHARED / "scenes" / "cup"


def _camera(width: int = 40, height: int = 30, f: float = 50.0, z: float = 0.0) -> Camera:
    viewmat = torch.eye(4)
    viewmat[2, 3] = z
    K = torch.tensor([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]])
    return Camera(viewmat=viewmat, K=K, width=width, height=height)


def test_a_point_lands_at_its_pixel_with_its_camera_depth_and_the_nearest_wins():
    points = np.array([[0.0, 0.0, 2.0], [0.0, 0.0, 3.0], [0.2, -0.1, 4.0], [0.0, 0.0, -1.0], [5.0, 0.0, 1.0]])
    depth = sparse_depth(points, _camera(z=0.5))
    assert depth.shape == (30, 40) and depth.dtype == np.float32
    assert depth[15, 20] == pytest.approx(2.5)  # the nearer of two on one ray, at z + the camera's shift
    u, v = int(50 * 0.2 / 4.5 + 20), int(50 * -0.1 / 4.5 + 15)
    assert depth[v, u] == pytest.approx(4.5)
    assert (depth > 0).sum() == 2  # behind the camera and outside the image: nowhere


def test_shrinking_keeps_every_point_of_a_sparse_map_and_the_nearest_of_a_block():
    depth = np.zeros((30, 40), np.float32)
    depth[3, 5], depth[20, 33], depth[21, 33] = 2.0, 5.0, 4.0
    small = shrink_depth(depth, (20, 15))
    assert small.shape == (15, 20)
    assert small[1, 2] == 2.0 and small[10, 16] == 4.0 and (small > 0).sum() == 2
    big = shrink_depth(depth, (80, 60))  # growing moves points, it does not spread them
    assert (big > 0).sum() == 3 and big[7, 11] == 2.0  # the centre of pixel (5, 3), doubled


def _model(tmp_path: Path, binary: bool) -> Path:
    cameras = [ColmapCamera(1, "PINHOLE", 40, 30, (50.0, 50.0, 20.0, 15.0))]
    images = [ColmapImage.from_viewmat(i + 1, f"{i}.png", 1, np.eye(4)) for i in range(3)]
    points = np.array([[0.0, 0.0, 2.0], [0.1, 0.0, 3.0], [0.0, 0.1, 4.0]])
    tracks = np.array([[0, 1], [0, 2], [1, 2], [2, 3], [1, 3], [0, 3]])
    sparse = tmp_path / ("bin" if binary else "txt")
    write_model(sparse, cameras, images, points, np.zeros((3, 3), np.uint8), binary=binary, tracks=tracks)
    return sparse


@pytest.mark.parametrize("binary", [True, False])
def test_tracks_are_written_and_read_back_with_each_photos_2d_points(tmp_path, binary):
    model = read_model(_model(tmp_path, binary))
    observed = model.observed_points()
    assert {k: v.tolist() for k, v in observed.items()} == {1: [0], 2: [0, 1], 3: [0, 1, 2]}
    if not binary:  # the 2D points are the projections: (20 + 50 * 0.1 / 3, 15) for point 2 in image 2
        line = (tmp_path / "txt" / "images.txt").read_text().splitlines()[4].split()
        assert [float(v) for v in line[3:5]] == pytest.approx([20 + 50 * 0.1 / 3, 15.0]) and line[5] == "2"


def test_a_model_without_tracks_is_refused_for_sparse_depths(tmp_path):
    root = tmp_path / "scene"
    write_model(root / "sparse" / "0", [ColmapCamera(1, "PINHOLE", 8, 6, (8.0, 8.0, 4.0, 3.0))],
                [ColmapImage.from_viewmat(1, "a.png", 1, np.eye(4)), ColmapImage.from_viewmat(2, "b.png", 1, np.eye(4))],
                np.array([[0.0, 0.0, 2.0]]), np.zeros((1, 3), np.uint8))
    (root / "images").mkdir()
    from PIL import Image

    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 6)).save(root / "images" / name)
    with pytest.raises(DataError, match="no sparse points with tracks"):
        load_scene(DataConfig(path=str(root), depths="sparse", test_every=0, downscale=1))


@needs_shared(CUP)
def test_the_cups_views_get_the_depths_of_the_points_they_saw_and_variants_keep_them(tmp_path):
    folder = write_variants(CUP, tmp_path, ["original"], width=80)["original"]
    overrides = json.loads((folder / "variant.json").read_text())["overrides"]
    assert overrides[0] == "data.test_every=0"
    source, copy = read_model(CUP / "sparse" / "0"), read_model(folder / "sparse" / "0")
    names = {image.id: image.name for image in source.images}
    seen = {names[i]: v for i, v in source.observed_points().items()}
    assert all(np.array_equal(seen[image.name], copy.observed_points()[image.id]) for image in copy.images)

    _, scene = load_scene(DataConfig(path=str(folder), depths="sparse", downscale=1))
    assert all(frame.depth is not None for frame in scene.train) and all(f.depth is None for f in scene.test)
    frame = scene.train[0]
    known = frame.depth > 0
    assert 20 < known.sum() <= len(scene.observed[frame.name])
    # each known pixel holds the depth of one of the points the photo saw, in the scene's units
    cam = scene.points[scene.observed[frame.name]].astype(np.float64) @ frame.camera.viewmat[:3, :3].double().numpy().T
    z = cam[:, 2] + float(frame.camera.viewmat[2, 3])
    assert np.isin(np.round(frame.depth[known], 4), np.round(z.astype(np.float32), 4)).all()
    half = downscaled_frame(frame, 2)  # a coarse-to-fine level keeps the points (the nearest where two meet)
    height, width = frame.depth.shape
    blocks = np.where(known, frame.depth, np.inf).reshape(height // 2, 2, width // 2, 2).min(axis=(1, 3))
    assert np.array_equal(half.depth, np.where(np.isfinite(blocks), blocks, 0).astype(np.float32))


@needs_shared(CUP)
def test_the_depth_term_on_sparse_depths_pulls_the_render_to_the_points(tmp_path):
    folder = write_variants(CUP, tmp_path, ["original"], width=80)["original"]

    def sparse_error(terms: str) -> float:
        cfg = load_config(
            "configs/colmap.yaml",
            [f"data.path={folder}", "data.downscale=1", "data.depths=sparse", "trainer.max_steps=150",
             f"output_dir={tmp_path / str(abs(hash(terms)))}", "writers=[]",
             "metrics.lpips=false", f"loss.terms={terms}", "default_hooks.checkpoint.interval=0"],
        )
        trainer = DefaultTrainer(cfg, console=Console(quiet=True))
        trainer.train()
        errors = []
        with torch.no_grad():
            for frame in trainer.data.train_frames[:10]:
                render = trainer.renderer.render(trainer.model, [frame.camera], 1, trainer.background)
                target = torch.from_numpy(frame.depth)[None, ..., None]
                valid = target > 0
                errors.append(((render.depth - target).abs() / target.clamp_min(1e-6) * valid).sum() / valid.sum())
        return float(torch.stack(errors).mean())

    plain = sparse_error("[{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}]")
    supervised = sparse_error("[{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}, {type: depth, weight: 0.5, relative: true}]")
    assert supervised < 0.6 * plain, (supervised, plain)  # 0.41 when written
