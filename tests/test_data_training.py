"""Datasets in the trainer: points init, masks, random backgrounds, notes, the recorded world transform, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from conftest import REPO
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from test_colmap import SIZE, make_colmap


def _config(tmp_path: Path, scene: Path, extra: str = "") -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(
        f"""
name: colmap_tiny
output_dir: {tmp_path / "run"}
data:
  path: {scene}
  test_every: 3
  random_background: true
{extra}
trainer:
  max_steps: 3
  val_interval: 0
model:
  sh_degree: 0
metrics:
  lpips: false
writers: []
"""
    )
    return path


def test_colmap_scene_with_points_and_masks_trains(tmp_path: Path) -> None:
    scene = tmp_path / "scene"
    make_colmap(scene, n=6)
    (scene / "masks").mkdir()
    mask = np.full(SIZE[::-1], 255, dtype=np.uint8)
    mask[:4] = 0
    for k in range(6):
        Image.fromarray(mask).save(scene / "masks" / f"img_{k:02d}.png")
    trainer = DefaultTrainer(load_config(_config(tmp_path, scene)), console=Console(quiet=True))
    assert trainer.data_type == "colmap" and trainer.model.num_gaussians == 2  # the two sparse points
    assert all(f.mask is not None and not f.mask[:4].any() for f in trainer.data.train_frames)
    transform = trainer.data.world_transform
    assert transform.shape == (4, 4) and not torch.allclose(transform, torch.eye(4, dtype=torch.float64))
    results = trainer.train()
    assert results["steps"] == 3 and np.isfinite(results["psnr"])
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "data.type auto: detected colmap" in log and "masks from" in log and "data.normalize" in log
    torch.testing.assert_close(trainer.checkpoint_state()["data"]["world_transform"], transform)


def test_bad_folder_exits_with_code_2_from_the_command_line(tmp_path: Path) -> None:
    scene = tmp_path / "scene"
    make_colmap(scene)
    (scene / "images" / "img_02.png").unlink()
    result = subprocess.run(
        [sys.executable, "-m", "splattrain", "fit", "--config", str(_config(tmp_path, scene))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "img_02.png: image not found" in lines[0] and "images.bin" in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_example_colmap_config_builds_on_a_colmap_folder(tmp_path: Path) -> None:
    scene = tmp_path / "scene"
    make_colmap(scene, n=9)
    overrides = [f"data.path={scene}", "data.downscale=1", f"output_dir={tmp_path / 'run'}", "writers=[]"]
    trainer = DefaultTrainer(
        load_config(REPO / "configs" / "colmap_example.yaml", overrides), console=Console(quiet=True)
    )
    assert trainer.data_type == "colmap"
    assert [f.name for f in trainer.data.test_frames] == ["img_00", "img_08"]
    assert trainer.model.num_gaussians == 2
