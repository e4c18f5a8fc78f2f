"""The geometry regularisers: their values on known inputs, when they start, how the renderer is
asked for their images, and a short training run with both."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from conftest import tiny_config_text
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.errors import ConfigError
from splattrain.losses import DepthDistortionLoss, NormalConsistencyLoss, build_loss, depth_normals
from splattrain.render import build_renderer
from splattrain.render.base import RenderResult

H = W = 12


def plane_depth(normal, K: torch.Tensor, offset: float = 3.0) -> torch.Tensor:
    """[1, H, W, 1] z-depth of the plane n . x = -offset (camera frame) at the pixel centres."""
    n = torch.tensor(normal, dtype=torch.float64)
    u, v = torch.meshgrid(torch.arange(W, dtype=torch.float64) + 0.5, torch.arange(H, dtype=torch.float64) + 0.5,
                          indexing="xy")
    rays = torch.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], torch.ones_like(u)], dim=-1)
    return (-offset / (rays @ n))[None, ..., None].float()


def camera_K() -> torch.Tensor:
    return torch.tensor([[20.0, 0.0, W / 2], [0.0, 22.0, H / 2], [0.0, 0.0, 1.0]])


def test_depth_normals_of_a_tilted_plane():
    normal = torch.nn.functional.normalize(torch.tensor([0.3, -0.2, -1.0]), dim=0)  # facing the camera
    normals, valid = depth_normals(plane_depth(normal.tolist(), camera_K()), camera_K()[None])
    assert valid.sum() == (H - 2) * (W - 2) and not valid[0, 0, 0, 0]
    torch.testing.assert_close(normals[valid[..., 0]], normal.expand(int(valid.sum()), 3), atol=1e-4, rtol=0)


def test_normal_consistency_is_zero_on_agreeing_normals_and_grows_with_the_angle():
    K = camera_K()
    normal = torch.nn.functional.normalize(torch.tensor([0.0, 0.0, -1.0]), dim=0)
    depth = plane_depth(normal.tolist(), K)
    alpha = torch.full((1, H, W, 1), 0.9)
    term = NormalConsistencyLoss()
    batch = {"camera": [SimpleNamespace(K=K)]}

    def value(rendered_normal):
        render = RenderResult(rgb=torch.zeros(1, H, W, 3), alpha=alpha, depth=depth,
                              normals=alpha * rendered_normal.expand(1, H, W, 3))
        return float(term(render, batch, None))

    assert value(normal) == pytest.approx(0.0, abs=1e-5)
    tilted = torch.tensor([math.sin(0.5), 0.0, -math.cos(0.5)])
    assert value(tilted) == pytest.approx(0.9 * (1 - math.cos(0.5)), rel=1e-4)  # sum_i w_i (1 - n_i . N)


def test_depth_distortion_is_the_relative_variance_and_ignores_transparency():
    term = DepthDistortionLoss()
    depth = torch.full((1, H, W, 1), 4.0)

    def value(alpha: float, spread: float):
        # two equal weights at 4 -/+ spread: variance spread^2, sum_ij w_i w_j (z_i - z_j)^2 / 2 = A^2 spread^2
        a = torch.full((1, H, W, 1), alpha)
        render = RenderResult(rgb=torch.zeros(1, H, W, 3), alpha=a, depth=depth, distortion=a.square() * spread**2)
        return float(term(render, {}, None))

    assert value(0.8, 0.0) == 0.0
    assert value(0.8, 0.2) == pytest.approx(0.8 * 0.2**2 / 16, rel=1e-5)
    # halving every weight halves only the pixel's say in the mean, not its variance
    assert value(0.4, 0.2) == pytest.approx(value(0.8, 0.2) / 2, rel=1e-5)


def test_terms_wait_for_their_start_step_and_check_it():
    term = NormalConsistencyLoss(start_step=100)
    render = RenderResult(rgb=torch.zeros(1, H, W, 3), alpha=torch.ones(1, H, W, 1))
    assert float(term(render, {"step": 99}, None)) == 0.0
    with pytest.raises(ConfigError, match="start_step must be a whole number >= 0"):
        DepthDistortionLoss(start_step=-1)


def test_loss_keeps_the_terms_the_renderer_can_feed_and_skips_the_others():
    loss = build_loss({"terms": [{"type": "l1"}, {"type": "depth_distortion"}, {"type": "normal_consistency"}]})
    assert loss.needs_depth and loss.needs_outputs == {"normals", "distortion"}
    renderer = build_renderer({"type": "torch"}, torch.device("cpu"))
    loss.drop_unavailable(SimpleNamespace(renderer=renderer), warn=pytest.fail)
    assert len(loss.terms) == 3 and loss.needs_outputs == {"normals", "distortion"}

    class Plain(type(renderer)):
        supported_extras = frozenset()

    warnings = []
    loss = build_loss({"terms": [{"type": "l1"}, {"type": "normal_consistency", "name": "nc"}]})
    loss.drop_unavailable(SimpleNamespace(renderer=Plain()), warn=warnings.append)
    assert [name for name, _ in loss.terms] == ["l1"]
    assert warnings == ["loss term 'nc' is skipped: renderer Plain does not render normals"]


def test_training_with_both_regularisers(tmp_path):
    extra = ("loss:\n  terms:\n    - {type: l1}\n    - {type: depth_distortion, weight: 10, start_step: 10}\n"
             "    - {type: normal_consistency, weight: 0.05, start_step: 10}\n"
             "default_hooks:\n  logger: {interval: 5}\n")
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=20, extra=extra))
    trainer = DefaultTrainer(load_config(tmp_path / "cfg.yaml"), console=Console(quiet=True))
    assert trainer.renderer.extra_outputs == {"normals", "distortion"}
    trainer.train()
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = {row["step"]: row for row in logged if "loss/depth_distortion" in row}
    assert steps[5]["loss/depth_distortion"] == 0.0 and steps[5]["loss/normal_consistency"] == 0.0
    assert steps[20]["loss/depth_distortion"] > 0.0 and steps[20]["loss/normal_consistency"] > 0.0
    assert all(math.isfinite(v) for row in steps.values() for k, v in row.items() if k.startswith("loss/"))


def test_the_surface_config_trains_with_both_terms():
    from conftest import REPO

    cfg = load_config(REPO / "configs" / "demo_surface.yaml")
    loss = build_loss(cfg.loss)
    assert [name for name, _ in loss.terms] == ["l1", "dssim", "depth_distortion", "normal_consistency"]
    assert all(term.start_step == 500 for name, term in loss.terms[2:])
