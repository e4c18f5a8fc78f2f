"""splattrain's own densification ops against gsplat 1.5's DefaultStrategy, step for step."""

from __future__ import annotations

import pytest
import torch
from gsplat.strategy import DefaultStrategy as GsplatDefaultStrategy
from gsplat.strategy.ops import reset_opa
from omegaconf import OmegaConf

from splattrain.cameras import Camera
from splattrain.config.schema import OptimConfig
from splattrain.model.gaussians import GaussianModel
from splattrain.optim import build_optimizers
from splattrain.render import TorchRenderer
from splattrain.strategy import DefaultStrategy, build_strategy

OPTIONS = dict(refine_start_iter=2, refine_every=3, reset_every=9, refine_stop_iter=20, grow_grad2d=2e-5,
               grow_scale3d=0.05, prune_scale3d=0.3, prune_opa=0.02)


def cameras():
    out = []
    for angle in torch.linspace(0, 1.5, 4):
        c, s = torch.cos(angle), torch.sin(angle)
        rotation = torch.tensor([[c, 0, -s], [0, 1, 0], [s, 0, c]])
        viewmat = torch.eye(4)
        viewmat[:3, :3] = rotation
        viewmat[2, 3] = 3.0
        K = torch.tensor([[40.0, 0, 24], [0, 40.0, 20], [0, 0, 1]])
        out.append(Camera(viewmat=viewmat, K=K, width=48, height=40))
    return out


def model_and_optimizers():
    g = torch.Generator().manual_seed(3)
    points = torch.rand(250, 3, generator=g) * 2 - 1
    model = GaussianModel.from_points(points, torch.rand(250, 3, generator=g), sh_degree=1, opacity=0.5, generator=g)
    with torch.no_grad():
        model.params["opacities"][:20] = torch.logit(torch.tensor(0.01))  # prunable
        model.params["scales"][20:30] += 1.5  # large: split, later pruned as too big
    return model, build_optimizers(model, OmegaConf.structured(OptimConfig), scene_scale=1.0)


def step_once(step, model, optimizers, strategy, state, camera, target, post_backward):
    render = TorchRenderer().render(model, [camera], 1, torch.ones(3), depth=False)
    render.info["n_cameras"] = 1
    strategy.step_pre_backward(model.params, optimizers, state, step, render.info)
    (render.rgb - target).abs().mean().backward()
    torch.manual_seed(1000 + step)  # splits draw their positions from the global generator
    post_backward(render.info)
    for optimizer in optimizers.values():
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("revised_opacity", [False, True])
def test_default_strategy_matches_gsplat_step_for_step(revised_opacity):
    torch.set_num_threads(1)
    ours_model, ours_opt = model_and_optimizers()
    ref_model, ref_opt = model_and_optimizers()
    ours = DefaultStrategy(**OPTIONS, revised_opacity=revised_opacity)
    ref = GsplatDefaultStrategy(**OPTIONS, revised_opacity=revised_opacity, verbose=False)
    ours_state, ref_state = ours.initialize_state(1.0), ref.initialize_state(1.0)
    views = cameras()
    targets = [torch.rand(1, 40, 48, 3, generator=torch.Generator().manual_seed(i)) for i in range(len(views))]
    counts = []
    for step in range(1, 20):
        camera, target = views[step % len(views)], targets[step % len(views)]

        def ref_post(info, step=step):
            ref.step_post_backward(ref_model.params, ref_opt, ref_state, step, info)
            if 0 < step < ref.refine_stop_iter and step % ref.reset_every == 0:  # gsplat 1.5 never resets
                reset_opa(ref_model.params, ref_opt, ref_state, value=ref.prune_opa * 2.0)

        step_once(step, ref_model, ref_opt, ref, ref_state, camera, target, ref_post)
        step_once(step, ours_model, ours_opt, ours, ours_state, camera, target,
                  lambda info, step=step: ours.post_backward(ours_model.params, ours_opt, ours_state, step, [info]))
        assert ours_model.num_gaussians == ref_model.num_gaussians, f"step {step}"
        counts.append(ours_model.num_gaussians)
        for name in ref_model.params:
            torch.testing.assert_close(ours_model.params[name], ref_model.params[name], rtol=1e-5, atol=1e-6)
            ours_state_of = ours_opt[name].state[ours_model.params[name]]
            ref_state_of = ref_opt[name].state[ref_model.params[name]]
            torch.testing.assert_close(ours_state_of["exp_avg"], ref_state_of["exp_avg"], rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(ours_state["grad2d"], ref_state["grad2d"], rtol=1e-5, atol=1e-8)
        if step == 3:  # the first refinement pruned the faint Gaussians
            assert (torch.sigmoid(ours_model.params["opacities"]) >= OPTIONS["prune_opa"]).all()
        if step == 9:  # the opacity reset (before this step's optimizer update)
            assert torch.sigmoid(ours_model.params["opacities"]).max() < 2 * OPTIONS["prune_opa"] + 0.01
    assert len(set(counts)) > 3 and max(counts) > 250  # the run cloned and split several times


def test_strategy_protocol_pieces_are_public():
    strategy = build_strategy({"type": "default", "max_gaussians": 10})
    assert strategy.supports_cap and strategy.max_gaussians == 10 and strategy.default_loss_terms() == []
    mcmc = build_strategy({"type": "mcmc", "max_gaussians": 10})
    assert {t["type"] for t in mcmc.default_loss_terms()} == {"opacity_reg", "scale_reg"}
