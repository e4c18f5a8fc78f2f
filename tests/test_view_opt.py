"""Per-view appearance and pose refinement: what they compute, their gradients, checkpoints and
exact resume, the renderer check, and cc_psnr."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from resume_check import assert_same, assert_same_run, make_trainer, single_thread, straight_and_resumed  # noqa: F401
from splattrain.cameras import Camera
from splattrain.errors import ConfigError
from splattrain.metrics import Evaluator, color_correct, psnr
from splattrain.model.gaussians import GaussianModel
from splattrain.render import build_renderer
from splattrain.view_opt import AffineAppearance, SE3PoseRefinement, ViewCorrections
from splattrain.view_opt.pose import so3_exp

SE3_AND_AFFINE = ["appearance.type=affine", "pose_opt.type=se3", "pose_opt.lr=0.01", "appearance.lr=0.05"]


def scene_and_camera():
    g = torch.Generator().manual_seed(0)
    model = GaussianModel.from_points(torch.rand(200, 3, generator=g) * 2 - 1, torch.rand(200, 3, generator=g),
                                      sh_degree=0, opacity=0.9, generator=g)
    viewmat = torch.eye(4)
    viewmat[2, 3] = 4.0
    K = torch.tensor([[40.0, 0, 16], [0, 40.0, 16], [0, 0, 1]])
    return model, Camera(viewmat=viewmat, K=K, width=32, height=32, name="v")


def test_color_correct_undoes_an_affine_colour_change() -> None:
    g = torch.Generator().manual_seed(1)
    pred = torch.rand(2, 16, 16, 3, generator=g) * 0.8 + 0.1
    matrix = torch.tensor([[0.7, 0.05, 0.0], [0.0, 0.8, 0.1], [0.02, 0.0, 0.6]])
    target = pred @ matrix.T + torch.tensor([0.05, 0.1, 0.0])
    assert psnr(pred, target) < 25 and psnr(color_correct(pred, target), target) > 60
    scores = Evaluator(False, "alex", torch.device("cpu"), print)(pred, target)
    assert scores["cc_psnr"] > 60 and scores["psnr"] < 25
    mask = torch.ones(2, 16, 16, 1, dtype=torch.bool)
    mask[:, :2] = False
    noisy = target.clone()
    noisy[:, :2] = 0.0  # outside the mask: must not disturb the fit
    assert psnr(color_correct(pred, noisy, mask), noisy, mask) > 60


def test_affine_appearance_starts_at_identity_and_learns_a_gain() -> None:
    module = AffineAppearance(n_views=3, lr=0.05, lr_final=0.05)
    rgb = torch.rand(2, 4, 4, 3)
    ids = torch.tensor([2, 0])
    assert torch.equal(module.apply(rgb, ids), rgb)
    assert module.apply(rgb + 1.0, ids).max() == 1.0  # clipped as a camera clips
    optimizer = module.make_optimizer()
    for _ in range(200):
        loss = (module.apply(rgb, ids) - rgb * torch.tensor([[[[0.6]]], [[[1.3]]]])).abs().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    gains = torch.diagonal(module.delta[:, :, :3], dim1=1, dim2=2).mean(dim=1) + 1
    assert abs(gains[2] - 0.6) < 0.05 and abs(gains[0] - 1.3) < 0.05 and gains[1] == 1.0  # view 1 unseen
    assert module.report()["appearance_gain_max_abs"] == pytest.approx(0.4, abs=0.05)


def test_so3_exp_matches_the_matrix_exponential() -> None:
    omega = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.2, 0.1], [1e-5, 0.0, 2e-5], [0.0, 2.0, 0.0]], dtype=torch.float64)
    skew = torch.zeros(4, 3, 3, dtype=torch.float64)
    skew[:, 0, 1], skew[:, 0, 2], skew[:, 1, 2] = -omega[:, 2], omega[:, 1], -omega[:, 0]
    skew = skew - skew.transpose(1, 2)
    assert torch.allclose(so3_exp(omega), torch.linalg.matrix_exp(skew), atol=1e-10)


def test_pose_gradients_reach_the_correction_through_the_torch_renderer() -> None:
    model, camera = scene_and_camera()
    pose = SE3PoseRefinement(n_views=2)
    renderer = build_renderer({"type": "torch"}, torch.device("cpu"))
    moved = pose.apply([camera], torch.tensor([1]))
    assert torch.equal(moved[0].viewmat, camera.viewmat)  # zero-initialised: the given pose
    renderer.render(model, moved, 0, torch.ones(3)).rgb.mean().backward()
    assert pose.delta.grad[1].abs().min() > 0 and pose.delta.grad[0].abs().max() == 0
    with torch.no_grad():
        pose.delta[1] = torch.tensor([0.0, 0.0, np.radians(3.0), 0.3, 0.0, 0.4])
    report = pose.report()
    assert report["pose_rot_deg_max"] == pytest.approx(3.0) and report["pose_trans_max"] == pytest.approx(0.5)
    assert report["pose_rot_deg_mean"] == pytest.approx(1.5)
    shifted = pose.apply([camera], torch.tensor([1]))[0]
    assert float(torch.linalg.norm(shifted.center - camera.center).detach()) == pytest.approx(0.5, abs=1e-6)


def test_cpu_renderer_pose_gradients_match_the_torch_renderer() -> None:
    """The compiled renderer reaches the cameras through the Gaussians (render/pose_grad.py): the
    torch renderer's images and pose gradient (view-dependent colours included), with two cameras
    of one batch merged as one render."""
    _, camera = scene_and_camera()
    g = torch.Generator().manual_seed(0)
    model = GaussianModel.from_points(torch.rand(200, 3, generator=g) * 2 - 1, torch.rand(200, 3, generator=g),
                                      sh_degree=3, opacity=0.9, generator=g)
    with torch.no_grad():
        model.params["shN"].normal_(0.0, 0.3, generator=g)  # strongly view-dependent colours
    second = Camera(viewmat=so3_4x4([0.0, 0.3, 0.05], [0.2, -0.1, 4.2]), K=camera.K, width=32, height=32, name="w")
    grads, images = {}, {}
    for kind in ("torch", "cpu"):
        renderer = build_renderer({"type": kind}, torch.device("cpu"))
        pose = SE3PoseRefinement(n_views=2)
        with torch.no_grad():
            pose.delta.copy_(torch.tensor([[0.01, -0.02, 0.015, 0.03, -0.02, 0.05], [0.0, 0.02, -0.01, -0.04, 0.01, 0.0]]))
        render = renderer.render(model, pose.apply([camera, second], torch.tensor([0, 1])), 3, torch.ones(3))
        assert render.rgb.shape == (2, 32, 32, 3) and render.info["radii"].shape[0] == 2
        render.info["means2d"].retain_grad()  # what densification reads
        (render.rgb * torch.linspace(0, 1, 3)).mean().backward()
        assert render.info["means2d"].grad.shape == (2, 200, 2) and render.info["means2d"].grad.abs().max() > 0
        grads[kind], images[kind] = pose.delta.grad.clone(), render.rgb.detach()
    plain = build_renderer({"type": "cpu"}, torch.device("cpu")).render(
        model, SE3PoseRefinement(n_views=2).apply([camera, second], torch.tensor([0, 1])), 3, torch.ones(3))
    assert images["cpu"].abs().max() > 0 and not torch.equal(images["cpu"], plain.rgb.detach())  # the correction moves it
    assert torch.allclose(images["cpu"], images["torch"], atol=1e-4)
    assert grads["cpu"].abs().min() > 0
    assert torch.allclose(grads["cpu"], grads["torch"], rtol=2e-3, atol=1e-6), (grads["cpu"], grads["torch"])


def so3_4x4(omega, translation) -> torch.Tensor:
    """A world-to-camera matrix from an axis-angle rotation and a translation."""
    out = torch.eye(4)
    out[:3, :3] = so3_exp(torch.tensor([omega]))[0]
    out[:3, 3] = torch.tensor(translation)
    return out


def test_pose_refinement_refuses_a_renderer_without_pose_gradients() -> None:
    from splattrain.render.cpu_renderer import CpuRenderer

    class PosesFixedRenderer(CpuRenderer):
        supports_pose_grad = False

    renderer = PosesFixedRenderer()
    with pytest.raises(ConfigError, match="pose_opt needs a renderer .* PosesFixedRenderer"):
        ViewCorrections({"type": "none"}, {"type": "se3"}, 4, torch.device("cpu"), renderer)
    corrections = ViewCorrections({"type": "affine"}, {"type": "none"}, 4, torch.device("cpu"), renderer)
    assert list(corrections.modules) == ["appearance"]
    with pytest.raises(ConfigError, match="unknown option 'pose_opt.lrr'"):
        ViewCorrections({"type": "none"}, {"type": "se3", "lrr": 1.0}, 4, torch.device("cpu"))


def test_exact_resume_with_appearance_and_pose_refinement(tmp_path: Path) -> None:
    straight, resumed = straight_and_resumed(tmp_path, overrides=SE3_AND_AFFINE)
    assert_same_run(straight, resumed)
    state = straight.view_opt.state_dict()
    assert set(state) == {"appearance", "pose_opt"}
    assert state["pose_opt"]["module"]["delta"].abs().max() > 0
    assert state["appearance"]["module"]["delta"].abs().max() > 0
    assert_same(state, resumed.view_opt.state_dict(), "view_opt")
    results = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert results["cc_psnr"] is not None and results["cc_psnr"] >= results["psnr"] - 1e-6
    assert results["pose_rot_deg_max"] > 0 and results["appearance_gain_max_abs"] > 0
    # test views keep their given poses and colours: validation does not go through the corrections
    assert resumed.last_metrics["psnr"] == straight.last_metrics["psnr"]


def test_corrections_off_by_default_leave_the_step_unchanged(tmp_path: Path) -> None:
    straight, _ = straight_and_resumed(tmp_path)
    assert not straight.view_opt.enabled and straight.view_opt.state_dict() == {}


def test_appearance_learns_each_views_exposure(tmp_path: Path) -> None:
    """On the exposure-varied demo the learned per-view gains follow the true ones."""
    from splattrain.engine import load_config
    from splattrain.console import Console
    from splattrain.synthetic.demo_variants import write_exposure_variant
    from splattrain.engine import DefaultTrainer

    gains = write_exposure_variant(tmp_path / "scene", seed=3, size=32, n_train=12, n_test=2)
    config = tmp_path / "cfg.yaml"
    config.write_text(
        f"name: exposure\noutput_dir: {tmp_path / 'run'}\ndata:\n  path: {tmp_path / 'scene'}\n"
        "trainer:\n  max_steps: 150\n  val_interval: 0\nmodel:\n  sh_degree: 0\n  init:\n    num_points: 2000\n"
        "strategy:\n  refine_start_iter: 1000\nmetrics:\n  lpips: false\nwriters: []\n"
        "appearance:\n  type: affine\n  lr: 0.01\n  lr_final: 0.001\n"
    )
    trainer = DefaultTrainer(load_config(config), console=Console(quiet=True))
    trainer.train()
    frames = trainer.data.train_frames
    order = [int(f.camera.name.split("_")[-1]) for f in frames]
    delta = trainer.view_opt.appearance.delta.detach()
    learned = (torch.diagonal(delta[:, :, :3], dim1=1, dim2=2) + 1).mean(dim=1).numpy()
    true = gains[order].mean(axis=1)
    assert np.corrcoef(np.log(learned), np.log(true))[0, 1] > 0.8


def test_pose_refinement_waits_for_its_start() -> None:
    model, camera = scene_and_camera()
    corrections = ViewCorrections({"type": "none"}, {"type": "se3", "start": 0.5}, 2, torch.device("cpu"),
                                  build_renderer({"type": "cpu"}, torch.device("cpu")), max_steps=10)
    renderer = build_renderer({"type": "cpu"}, torch.device("cpu"))
    batch = {"camera": [camera], "image_id": torch.tensor([1])}
    moved = []
    for step in range(1, 9):
        renderer.render(model, corrections.cameras(batch), 0, torch.ones(3)).rgb.mean().backward()
        corrections.step(step)
        moved.append(float(corrections.pose.delta.detach().abs().max()))
    assert moved[:4] == [0.0] * 4 and all(m > 0 for m in moved[4:])  # steps 1-4 wait, 5-8 learn
    with pytest.raises(ConfigError, match="start is 1.0"):
        SE3PoseRefinement(n_views=2, start=1.0)


@pytest.mark.parametrize("max_steps", [10, 40])
def test_pose_refinement_start_step_is_the_same_step_however_long_the_run(max_steps: int) -> None:
    model, camera = scene_and_camera()
    renderer = build_renderer({"type": "cpu"}, torch.device("cpu"))
    corrections = ViewCorrections({"type": "none"}, {"type": "se3", "start": 0.9, "start_step": 3}, 2,
                                  torch.device("cpu"), renderer, max_steps=max_steps)
    batch = {"camera": [camera], "image_id": torch.tensor([1])}
    moved = []
    for step in range(1, 7):
        cameras = corrections.cameras(batch, step)
        assert (cameras is batch["camera"]) == (step <= 3)  # before its start: the cameras as given
        renderer.render(model, cameras, 0, torch.ones(3)).rgb.mean().backward()
        corrections.step(step)
        moved.append(float(corrections.pose.delta.detach().abs().max()))
    assert moved[:3] == [0.0] * 3 and all(m > 0 for m in moved[3:])  # steps 1-3 wait, 4-6 learn
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match="start_step"):
            SE3PoseRefinement(n_views=2, start_step=bad)


def test_pose_refinement_stop_step_keeps_the_poses_as_learned() -> None:
    model, camera = scene_and_camera()
    renderer = build_renderer({"type": "cpu"}, torch.device("cpu"))
    corrections = ViewCorrections({"type": "none"}, {"type": "se3", "start_step": 2, "stop_step": 4}, 2,
                                  torch.device("cpu"), renderer, max_steps=8)
    batch = {"camera": [camera], "image_id": torch.tensor([1])}
    deltas = []
    for step in range(1, 9):
        cameras = corrections.cameras(batch, step)
        assert cameras[0].viewmat.requires_grad == (step in (3, 4))  # a pose gradient only while learning
        renderer.render(model, cameras, 0, torch.ones(3)).rgb.mean().backward()
        corrections.step(step)
        deltas.append(corrections.pose.delta.detach().clone())
    assert float(deltas[1].abs().max()) == 0.0 and float(deltas[3].abs().max()) > float(deltas[2].abs().max()) > 0
    assert all(torch.equal(d, deltas[3]) for d in deltas[4:])  # kept as learned after step 4
    kept = corrections.cameras(batch, 8)[0].viewmat
    assert not torch.equal(kept, camera.viewmat) and torch.equal(kept, corrections.cameras(batch)[0].viewmat.detach())
    with pytest.raises(ConfigError, match="stop_step 2 is not after start_step 2"):
        SE3PoseRefinement(n_views=2, start_step=2, stop_step=2)


def test_a_run_no_longer_than_start_step_trains_as_without_pose_refinement(tmp_path: Path) -> None:
    plain = make_trainer(tmp_path, "plain")
    plain.train()
    held = make_trainer(tmp_path, "held", overrides=["pose_opt.type=se3", "pose_opt.start_step=12"])
    held.train()
    assert_same(plain.model.state_dict(), held.model.state_dict(), "gaussians")
    assert float(held.view_opt.pose.delta.detach().abs().max()) == 0.0
    late = make_trainer(tmp_path, "late", overrides=["pose_opt.type=se3", "pose_opt.start_step=9"])
    late.train()
    assert float(late.view_opt.pose.delta.detach().abs().max()) > 0.0  # steps 10-12 moved the poses
    assert not torch.equal(plain.model.params["means"], late.model.params["means"])


def test_bilateral_grid_starts_at_identity_and_learns_what_one_affine_map_cannot() -> None:
    """A gain that changes across the image (a vignette) and with brightness: one affine map per
    view cannot follow it, the bilateral grid can."""
    from splattrain.view_opt import BilateralGridAppearance

    g = torch.Generator().manual_seed(3)
    rgb = torch.rand(2, 24, 32, 3, generator=g) * 0.6 + 0.2
    ids = torch.tensor([1, 0])
    ramp = torch.linspace(0.6, 1.3, 32)[None, None, :, None]
    target = (rgb * ramp).clamp(0, 1)
    grid = BilateralGridAppearance(n_views=2, lr=2e-2, lr_final=2e-2, tv_weight=0.0)
    assert torch.equal(grid.apply(rgb, ids), rgb)  # identity at the start
    affine = AffineAppearance(n_views=2, lr=2e-2, lr_final=2e-2)
    errors = {}
    for module in (grid, affine):
        optimizer = module.make_optimizer()
        for _ in range(300):
            loss = (module.apply(rgb, ids) - target).abs().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        errors[type(module).__name__] = float(loss.detach())
    assert errors["BilateralGridAppearance"] < 0.01 < 0.5 * errors["AffineAppearance"], errors
    smooth = BilateralGridAppearance(n_views=2)
    with torch.no_grad():
        assert float(smooth.regularization(ids)) == 0.0  # identity everywhere: nothing to smooth
        smooth.delta[1, 0, 0, 0, 0] = 1.0
        assert float(smooth.regularization(ids)) > 0 and float(smooth.regularization(torch.tensor([0]))) == 0.0


def test_exact_resume_with_the_bilateral_grid(tmp_path: Path) -> None:
    from splattrain.hooks import Hook

    class Penalties(Hook):
        def __init__(self) -> None:
            super().__init__()
            self.values = []

        def after_backward(self, trainer, step, outputs) -> None:
            self.values.append(float(outputs["losses"]["view_opt"].detach()))

    probes = []
    straight, resumed = straight_and_resumed(tmp_path, overrides=["appearance.type=bilateral", "appearance.lr=0.01"],
                                             hooks=lambda: probes.append(Penalties()) or probes[-1:])
    assert_same_run(straight, resumed)
    assert straight.view_opt.state_dict()["appearance"]["module"]["delta"].abs().max() > 0
    assert_same(straight.view_opt.state_dict(), resumed.view_opt.state_dict(), "view_opt")
    # the smoothness penalty is in every step's loss (zero on grids not yet moved), and the grids moved
    assert len(probes[0].values) == 12 and probes[1].values == probes[0].values[6:]
    grids = straight.view_opt.appearance
    with torch.no_grad():
        assert float(grids.regularization(torch.arange(grids.n_views))) > 0
