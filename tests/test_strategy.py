"""Densification strategy on CPU: growth, pruning and the opacity reset."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from splattrain.cameras import Camera
from splattrain.config.schema import OptimConfig
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel
from splattrain.optim import build_optimizers
from splattrain.render import TorchRenderer
from splattrain.strategy import build_strategy


def setup(**options):
    g = torch.Generator().manual_seed(0)
    points = torch.rand(400, 3, generator=g) * 2 - 1
    model = GaussianModel.from_points(points, torch.rand(400, 3, generator=g), sh_degree=0, opacity=0.9, generator=g)
    optimizers = build_optimizers(model, OmegaConf.structured(OptimConfig), scene_scale=1.0)
    renderer = TorchRenderer()
    strategy = build_strategy({"type": "default", **options}, renderer)
    state = strategy.initialize_state(scene_scale=1.0)
    viewmat = torch.eye(4)
    viewmat[2, 3] = 4.0
    K = torch.tensor([[60.0, 0, 32], [0, 60.0, 32], [0, 0, 1]])
    camera = Camera(viewmat=viewmat, K=K, width=64, height=64)
    return model, optimizers, strategy, state, renderer, camera


def run_step(step, model, optimizers, strategy, state, renderer, camera):
    result = renderer.render(model, [camera], 0, torch.ones(3))
    strategy.step_pre_backward(model.params, optimizers, state, step, result.info)
    (result.rgb - 0.2).abs().mean().backward()
    strategy.step_post_backward(model.params, optimizers, state, step, result.info)
    for optimizer in optimizers.values():
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def test_opacity_reset_happens_at_reset_every():
    parts = setup(reset_every=5, refine_start_iter=1000, prune_opa=0.01)
    model = parts[0]
    for step in range(1, 5):
        run_step(step, *parts)
    assert model.opacities.min() > 0.5
    run_step(5, *parts)
    assert model.opacities.max() <= 0.02 + 1e-6  # reset to 2 x prune_opa


def test_growth_adds_gaussians_and_keeps_optimizer_state_aligned():
    parts = setup(refine_start_iter=1, refine_every=2, grow_grad2d=1e-7)
    model, optimizers = parts[0], parts[1]
    before = model.num_gaussians
    for step in range(1, 4):
        run_step(step, *parts)
    assert model.num_gaussians > before
    for name, optimizer in optimizers.items():
        param = optimizer.param_groups[0]["params"][0]
        assert param is model.params[name]
        assert optimizer.state[param]["exp_avg"].shape == param.shape


def test_absgrad_refused_for_renderers_without_it():
    """A renderer (a plugin's) that does not say it computes absolute gradients is refused; the
    shipped ones all compute them."""
    from splattrain.render.cpu_renderer import CpuRenderer

    class PluginRenderer(TorchRenderer):
        supports_absgrad = False

    cfg = {"type": "default", "absgrad": True}
    with pytest.raises(ConfigError, match="absgrad"):
        build_strategy(cfg, PluginRenderer())
    assert build_strategy(cfg, TorchRenderer()).absgrad
    assert build_strategy(cfg, CpuRenderer()).absgrad
