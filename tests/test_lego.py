"""The NeRF-synthetic protocol of configs/blender.yaml: its 30,000-step run is the 3DGS paper's
schedule, and a small version of the lego scene trains on the training views over white and is
scored, by the trainer and by ``splattrain eval``, on every test view."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import cli_runner
from conftest import REPO, needs_shared
from lego_views import LEGO, lego_subset
from splattrain.console import Console
from splattrain.engine import DefaultTrainer, load_config
from splattrain.optim.optimizers import build_schedules
from splattrain.registry import STRATEGIES

PRESET = REPO / "configs" / "blender.yaml"


def test_the_presets_30000_step_run_is_the_3dgs_papers():
    cfg = load_config(PRESET, ["data.path=scene", "trainer.max_steps=30000"])
    strategy = STRATEGIES.build(OmegaConf.to_container(cfg.strategy, resolve=True))
    assert type(strategy).__name__ == "DefaultStrategy"
    # densify from 500 to 15,000 every 100 steps, opacity reset every 3000 (3DGS train.py)
    assert (strategy.refine_start_iter, strategy.refine_stop_iter, strategy.refine_every) == (500, 15000, 100)
    assert strategy.reset_every == 3000
    events = strategy.events(30000)
    assert events["refine"] == list(range(600, 15000, 100))
    assert events["reset"] == [3000, 6000, 9000, 12000]
    assert (strategy.grow_grad2d, strategy.grow_scale3d, strategy.prune_opa) == (0.0002, 0.01, 0.005)
    assert (cfg.model.sh_degree, cfg.model.sh_degree_interval) == (3, 1000)
    # position 1.6e-4 -> 1.6e-6 (times the scene extent) exponentially over the 30,000 steps
    optim = cfg.optim
    assert (optim.means_lr, optim.means_lr_final) == (1.6e-4, 1.6e-6)
    means = build_schedules(optim, 30000)["means"]
    assert means.factor(0) == 1.0 and means.factor(15000) == pytest.approx(0.1) and means.factor(30000) == pytest.approx(0.01)
    assert (optim.scales_lr, optim.quats_lr, optim.opacities_lr, optim.sh0_lr) == (5e-3, 1e-3, 5e-2, 2.5e-3)
    assert optim.shN_lr == pytest.approx(2.5e-3 / 20)
    assert cfg.loss.terms is None and cfg.loss.ssim_lambda is None  # 0.8 L1 + 0.2 D-SSIM
    init = cfg.model.init
    assert (init.type, init.num_points, init.extent, init.opacity) == ("random", 100000, 1.3, 0.1)
    assert (cfg.data.type, cfg.data.downscale, list(cfg.data.background)) == ("blender", 1.0, [1.0, 1.0, 1.0])
    assert cfg.data.test_split == "test" and not cfg.data.random_background
    assert cfg.trainer.max_steps == 30000 and cfg.trainer.val_interval == 15000
    # the one departure: coarse-to-fine up to the first opacity reset (1/4, 1/2, then full size)
    assert OmegaConf.to_container(cfg.trainer.resolution.schedule) == [[0, 4], [1000, 2], [3000, 1]]


def test_the_default_7000_steps_keep_the_papers_proportions():
    cfg = load_config(PRESET, ["data.path=scene"])
    strategy = cfg.strategy
    assert cfg.trainer.max_steps == 7000
    assert (strategy.refine_start_iter, strategy.refine_stop_iter, strategy.reset_every) == (117, 3500, 700)
    assert strategy.refine_every == 100  # a statistics window: not scaled
    assert cfg.model.sh_degree_interval == 233 and cfg.trainer.val_interval == 3500
    assert OmegaConf.to_container(cfg.trainer.resolution.schedule) == [[0, 4], [233, 2], [700, 1]]


@needs_shared(LEGO)
def test_lego_trains_over_white_and_is_scored_on_every_test_view(tmp_path):
    scene = lego_subset(tmp_path / "lego", train=[0, 1, 2, 3], test=[0, 7, 199])
    run = tmp_path / "run"
    cfg = load_config(PRESET, [f"data.path={scene}", "data.downscale=8", "trainer.max_steps=40",
                               "model.init.num_points=2000", f"output_dir={run}", "writers=[]",
                               "metrics.lpips=false"])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    assert [f.camera.name for f in trainer.data.train_frames] == ["r_0", "r_1", "r_2", "r_3"]
    test = [f.camera.name for f in trainer.data.test_frames]
    assert test == ["r_0", "r_7", "r_199"]
    first = next(trainer.data.test_batches())
    assert first["camera"][0].width == 100 and first["camera"][0].height == 100  # 800 / 8
    assert torch.all(first["image"][0, 0, 0] == 1.0)  # a transparent corner, over white
    centers = np.array([np.array(frame["transform_matrix"])[:3, 3] for frame in
                        json.loads((scene / "transforms_train.json").read_text())["frames"]])
    extent = 1.1 * np.linalg.norm(centers - centers.mean(0), axis=1).max()
    assert trainer.scene_scale == pytest.approx(extent, rel=1e-5)
    assert trainer.optimizers["means"].param_groups[0]["lr"] == pytest.approx(1.6e-4 * extent, rel=1e-5)
    results = trainer.train()
    assert [view["view"] for view in results["per_view"]] == test
    assert results["steps"] == 40 and math.isfinite(results["psnr"]) and results["lpips"] is None

    env = {**os.environ, "TORCH_HOME": str(tmp_path / "no_weights")}
    done = cli_runner.run(["eval", str(run)], REPO, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((run / "eval" / "step_000040" / "metrics.json").read_text())
    assert report["split"] == "test" and [view["view"] for view in report["per_view"]] == test
    assert report["psnr"] == pytest.approx(results["psnr"], abs=1e-4)
    assert report["ssim"] == pytest.approx(results["ssim"], abs=1e-5)
    assert report["lpips"] is None


@needs_shared(LEGO)
def test_a_lego_folder_without_its_test_file_names_the_missing_split(tmp_path):
    scene = lego_subset(tmp_path / "lego", train=[0], test=[0])
    (scene / "transforms_test.json").unlink()  # and no transforms_val.json to stand in
    done = cli_runner.run(["fit", "--config", str(PRESET), f"data.path={scene}", f"output_dir={tmp_path / 'run'}",
                           "--dry-run"], REPO)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "transforms_test.json" in done.stderr and "Traceback" not in done.stderr
