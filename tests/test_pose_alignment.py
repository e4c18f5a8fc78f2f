"""``metrics.align_poses``: test views also scored after fitting their pose to the frozen scene
(``aligned_psnr``), in a run's validation and in ``splattrain eval``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import REPO
from splattrain.cameras import Camera
from splattrain.commands.evaluate import evaluate
from splattrain.console import Console
from splattrain.engine import DefaultTrainer, load_config
from splattrain.errors import ConfigError
from splattrain.metrics import psnr
from splattrain.metrics.pose_alignment import aligned_camera, aligned_psnr
from splattrain.view_opt.pose import so3_exp


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> DefaultTrainer:
    """The demo preset after 600 steps (about 30 dB), validated at the end with aligned test poses."""
    folder = tmp_path_factory.mktemp("aligned")
    cfg = load_config(str(REPO / "configs" / "demo.yaml"),
                      [f"output_dir={folder / 'run'}", "trainer.max_steps=600", "trainer.val_interval=600",
                       "metrics.lpips=false", "metrics.align_poses=30", "writers=[]"])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    trainer.train()
    return trainer


def _turned(camera: Camera, degrees: float) -> Camera:
    """``camera`` turned about its own y axis."""
    turn = torch.eye(4)
    turn[:3, :3] = so3_exp(torch.tensor([[0.0, math.radians(degrees), 0.0]]))[0]
    return Camera(viewmat=turn @ camera.viewmat, K=camera.K, width=camera.width, height=camera.height, name=camera.name)


def test_a_test_view_with_a_wrong_pose_scores_as_its_true_pose_once_aligned(trained):
    batch = next(iter(trained.data.test_batches()))
    camera, image = batch["camera"][0], batch["image"]
    render = torch.no_grad()(trained.renderer.render)
    true = psnr(render(trained.model, [camera], 1, trained.background).rgb, image)
    wrong = _turned(camera, 1.0)
    plain = psnr(render(trained.model, [wrong], 1, trained.background).rgb, image)
    for param in trained.model.params.values():
        param.grad = None
    fitted = aligned_camera(trained.renderer, trained.model, wrong, image, 1, trained.background, steps=100)
    assert all(param.grad is None for param in trained.model.params.values())  # the scene stays frozen
    aligned = psnr(render(trained.model, [fitted], 1, trained.background).rgb, image)
    assert plain < true - 3.0, (plain, true)  # a degree costs the view
    assert aligned > true - 0.5, (aligned, plain, true)  # and aligning wins it back
    assert aligned_psnr(trained.renderer, trained.model, {"camera": [camera], "image": image}, 1, trained.background,
                        steps=30) >= true - 0.05  # a right pose stays about right


def test_validation_reports_aligned_psnr_beside_the_plain_scores(trained):
    results = json.loads((trained.run_dir / "results.json").read_text())
    assert results["aligned_psnr"] >= results["psnr"] - 0.05
    assert all(view["aligned_psnr"] >= view["psnr"] - 0.1 for view in results["per_view"])


def test_eval_aligns_on_request_and_otherwise_reports_no_aligned_score(trained, tmp_path):
    plain = evaluate(trained.run_dir, Console(quiet=True), out=tmp_path / "plain", align_poses=0)
    aligned = evaluate(trained.run_dir, Console(quiet=True), out=tmp_path / "aligned", align_poses=30)
    assert "aligned_psnr" not in plain and aligned["psnr"] == pytest.approx(plain["psnr"])
    written = json.loads((tmp_path / "aligned" / "metrics.json").read_text())
    assert written["aligned_psnr"] == pytest.approx(aligned["aligned_psnr"])
    assert aligned["aligned_psnr"] >= aligned["psnr"] - 0.05


def test_a_negative_step_count_is_refused_when_the_run_is_built(tmp_path):
    cfg = load_config(str(REPO / "configs" / "demo.yaml"), [f"output_dir={tmp_path}", "metrics.align_poses=-1"])
    with pytest.raises(ConfigError, match="align_poses must be 0"):
        DefaultTrainer(cfg, console=Console(quiet=True))


def test_a_renderer_without_pose_gradients_is_refused():
    class Flat:
        supports_pose_grad = False

    camera = Camera(viewmat=torch.eye(4), K=torch.eye(3), width=4, height=4)
    with pytest.raises(ConfigError, match="align_poses needs a renderer"):
        aligned_camera(Flat(), None, camera, torch.zeros(1, 4, 4, 3), 0, torch.zeros(3), steps=1)
