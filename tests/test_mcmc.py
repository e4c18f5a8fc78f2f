"""MCMC densification on the CPU (the relocation against the paper's Eq. 9, the cap, resume) and absgrad."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from resume_check import CountAfterStep, assert_same_run, make_trainer, straight_and_resumed, single_thread  # noqa: F401
from splattrain.config.schema import OptimConfig
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel
from splattrain.optim import build_optimizers
from splattrain.render.torch_rasterizer import rasterize
from splattrain.strategy import build_strategy
from splattrain.strategy import relocation as mcmc

MCMC = [
    "strategy.type=mcmc", "strategy.max_gaussians=330", "strategy.refine_start_iter=1", "strategy.refine_every=2",
]


def eq9(opacity: float, scale: float, n: int):
    """Eq. 9 of Kheradmand et al. 2024, literally, in float64."""
    new_opacity = 1.0 - (1.0 - opacity) ** (1.0 / n)
    denominator = sum(
        math.comb(i - 1, k) * (-1) ** k / math.sqrt(k + 1) * new_opacity ** (k + 1)
        for i in range(1, n + 1)
        for k in range(i)
    )
    return new_opacity, opacity / denominator * scale


@pytest.mark.parametrize("dtype, rel", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_relocation_matches_equation_9(dtype, rel):
    opacities = [0.01, 0.3, 0.7, 0.95, 0.999]
    ratios = [1, 2, 3, 5, 10, 30, 51]
    grid = [(o, n) for o in opacities for n in ratios]
    o = torch.tensor([g[0] for g in grid], dtype=dtype)
    n = torch.tensor([g[1] for g in grid])
    scales = torch.linspace(0.01, 2.0, len(grid), dtype=dtype)[:, None].repeat(1, 3)
    new_o, new_s = mcmc.compute_relocation(o, scales, n, mcmc.binomial_table())
    for i, (opacity, count) in enumerate(grid):
        want_o, want_s = eq9(opacity, float(scales[i, 0]), count)
        assert float(new_o[i]) == pytest.approx(want_o, rel=rel)
        assert new_s[i].tolist() == pytest.approx([want_s] * 3, rel=rel)
    # n copies stacked at one point are as opaque as the original; n = 1 changes nothing
    torch.testing.assert_close(1 - (1 - new_o) ** n.to(dtype), o)
    single = n == 1
    torch.testing.assert_close(new_s[single], scales[single])


def test_relocation_matches_gsplat_kernel():
    """gsplat's ``compute_relocation`` (its argument handling: ratio clamping, int cast) with the
    CUDA ``relocation_kernel`` replaced by a line-by-line float32 transcription of RelocationCUDA.cu
    (tests/gsplat_on_cpu.py), against splattrain's float64 series cast to float32."""
    from gsplat.relocation import compute_relocation

    from gsplat_on_cpu import gsplat_on_cpu

    g = torch.Generator().manual_seed(0)
    o = torch.rand(200, generator=g) * 0.98 + 0.01
    scales = torch.rand(200, 3, generator=g) + 0.1
    ratios = torch.randint(1, 20, (200,), generator=g)
    ratios[:3] = torch.tensor([0, 51, 70])  # clamped to [1, n_max] by both
    binoms = mcmc.binomial_table().float()
    ours = mcmc.compute_relocation(o, scales, ratios, binoms)
    with gsplat_on_cpu():
        theirs = compute_relocation(o, scales, ratios.clone(), binoms)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def small_scene(n: int = 12):
    g = torch.Generator().manual_seed(0)
    model = GaussianModel.from_points(torch.rand(n, 3, generator=g), torch.rand(n, 3, generator=g), 0, opacity=0.5)
    optimizers = build_optimizers(model, OmegaConf.structured(OptimConfig), 1.0)
    for optimizer in optimizers.values():  # give Adam some state to follow
        optimizer.param_groups[0]["params"][0].grad = torch.ones_like(optimizer.param_groups[0]["params"][0])
        optimizer.step()
    return model, optimizers


def test_relocate_moves_dead_gaussians_onto_live_ones():
    torch.manual_seed(0)
    model, optimizers = small_scene()
    params = model.params
    with torch.no_grad():
        params["opacities"][:3] = -10.0  # dead
    before = {k: v.detach().clone() for k, v in params.items()}
    dead = torch.sigmoid(params["opacities"]) <= 0.005
    sources = mcmc.relocate(params, optimizers, dead, mcmc.binomial_table(), 0.005)
    assert len(params["means"]) == 12 and len(sources) == 12
    assert (sources[:3] == -1).all()
    sampled = ((sources == -1) & ~dead).nonzero().flatten()
    for row in range(3):  # each dead row now copies a sampled live Gaussian
        assert any(torch.equal(params["means"][row], params["means"][s]) for s in sampled)
    kept = sources >= 0
    assert torch.equal(params["opacities"][kept], before["opacities"][kept])
    for name, optimizer in optimizers.items():
        param = params[name]
        assert optimizer.param_groups[0]["params"][0] is param
        if param.numel() == 0:  # shN at SH degree 0
            continue
        assert optimizer.state[param]["exp_avg"][~kept].abs().sum() == 0
        assert optimizer.state[param]["exp_avg"][kept].abs().sum() > 0


def test_sample_add_appends_gaussians():
    torch.manual_seed(0)
    model, optimizers = small_scene()
    sources = mcmc.sample_add(model.params, optimizers, 5, mcmc.binomial_table(), 0.005)
    assert len(model.params["means"]) == 17 and (sources[12:] == -1).all()
    assert all(optimizers[n].state[p]["exp_avg"].shape[0] == 17 for n, p in model.params.items())


def test_remove_gaussians_leaves_the_binomial_table_alone():
    model, optimizers = small_scene()
    strategy = build_strategy({"type": "mcmc", "max_gaussians": 50}, None)
    state = strategy.initialize_state()
    seen = []
    strategy.add_reindex_listener(lambda sources, params: seen.append(sources.tolist()))
    strategy.remove_gaussians(model.params, optimizers, state, torch.arange(12) < 2)
    assert len(model.params["means"]) == 10 and state["binoms"].shape == (51, 51)
    assert seen == [list(range(2, 12))]


def test_noise_moves_only_transparent_gaussians_by_their_covariance():
    model, _ = small_scene()
    params = model.params
    with torch.no_grad():
        params["opacities"][:6] = torch.logit(torch.tensor(0.001))
        params["opacities"][6:] = torch.logit(torch.tensor(0.9))
    before = params["means"].detach().clone()
    torch.manual_seed(1)
    eps = torch.randn(12, 3)
    torch.manual_seed(1)
    mcmc.inject_noise(params, scale=2.0)
    moved = params["means"].detach() - before
    assert moved[6:].abs().max() < 1e-20  # gate sigmoid(100 (0.1 - 0.995)) ~ 1e-39
    scales = torch.exp(params["scales"][0])
    from gsplat.utils import normalized_quat_to_rotmat

    rotation = normalized_quat_to_rotmat(torch.nn.functional.normalize(params["quats"][0], dim=-1))
    covariance = rotation @ torch.diag(scales**2) @ rotation.T
    gate = torch.sigmoid(torch.tensor(100 * (0.999 - 0.995)))
    torch.testing.assert_close(moved[0], covariance @ eps[0] * gate * 2.0)



def test_compiled_noise_matches_the_pytorch_path():
    from splattrain.kernels.build import load_library

    load_library()
    g = torch.Generator().manual_seed(3)
    n = 5000
    params = {"means": torch.randn(n, 3, generator=g), "quats": torch.randn(n, 4, generator=g),
              "scales": torch.randn(n, 3, generator=g) - 4.0, "opacities": torch.linspace(-9.0, 3.0, n)}
    eps = torch.randn(n, 3, generator=g)
    by_torch, compiled = ({k: v.clone() for k, v in params.items()} for _ in range(2))
    mcmc._inject_noise_torch(by_torch, eps, 500.0)
    assert mcmc._inject_noise_compiled(compiled, eps, 500.0)
    moves = by_torch["means"] - params["means"]
    assert moves[:100].abs().min() > 1e-4 and moves[-100:].abs().max() == 0  # transparent ones move, opaque stay
    torch.testing.assert_close(compiled["means"] - params["means"], moves, rtol=1e-5, atol=1e-6 * float(moves.abs().max()))
    # inject_noise takes the compiled path (the same draw from the global generator) ...
    entry = {k: v.clone() for k, v in params.items()}
    torch.manual_seed(11)
    mcmc.inject_noise(entry, 500.0)
    torch.manual_seed(11)
    expected = {k: v.clone() for k, v in params.items()}
    mcmc._inject_noise_compiled(expected, torch.randn(n, 3), 500.0)
    assert torch.equal(entry["means"], expected["means"])
    # ... and PyTorch's for what the library does not take
    assert not mcmc._inject_noise_compiled({k: v.double() for k, v in params.items()}, eps.double(), 500.0)

class CountAndTerms(CountAfterStep):
    def after_train_iter(self, trainer, step, batch, outputs):
        super().after_train_iter(trainer, step, batch, outputs)
        self.terms = set(outputs["losses"])


def test_mcmc_trains_on_cpu_and_respects_the_cap(tmp_path):
    counter = CountAndTerms()
    trainer = make_trainer(tmp_path, "run", steps=10, overrides=MCMC, hooks=[counter])
    trainer.train()
    assert counter.counts[0] == 300 and max(counter.counts) == 330 == counter.counts[-1]
    assert counter.counts == sorted(counter.counts)  # 5% more every 2 steps, capped
    assert {"opacity_reg", "scale_reg"} <= counter.terms


def test_resume_with_mcmc_matches_a_straight_run(tmp_path):
    straight, resumed = straight_and_resumed(tmp_path, overrides=MCMC)
    assert straight.model.num_gaussians == 330
    assert_same_run(straight, resumed)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"type": "mcmc"}, "needs strategy.max_gaussians"),
        ({"type": "adc"}, "unknown strategy type 'adc'"),
        ({"type": "default", "refine_evry": 10}, "strategy 'default': unknown option 'strategy.refine_evry'.*did you mean 'refine_every'"),
        ({"type": "default", "refine_every": "often"}, "option 'strategy.refine_every' must be int"),
        ({"type": "mcmc", "max_gaussians": 10, "prune_opa": 0.01}, "write strategy.min_opacity"),
        ({"type": "mcmc", "max_gaussians": 10, "scale_reg": 0.01}, "write loss.terms"),
    ],
)
def test_strategy_options_are_checked(options, message):
    with pytest.raises(ConfigError, match=message):
        build_strategy(options, object())


@pytest.mark.parametrize(
    "options, message",
    [
        ({"type": "mcmc", "max_gaussians": 10, "grow_grad2d": 0.001}, "mcmc ignores strategy.grow_grad2d=0.001"),
        ({"noise_lr": 1.0, "min_opacity": 0.5}, "default ignores strategy.noise_lr=1.0, strategy.min_opacity=0.5"),
    ],
)
def test_options_of_the_other_type_are_reported(options, message):
    warnings = []
    build_strategy(options, object(), warn=warnings.append)
    assert warnings == [f"strategy.type {message}"]


def test_default_strategy_growth_stops_at_the_cap(tmp_path):
    counter = CountAfterStep()
    overrides = ["strategy.max_gaussians=320", "strategy.refine_start_iter=1", "strategy.refine_every=2",
                 "strategy.grow_grad2d=0.0001"]
    make_trainer(tmp_path, "run", steps=6, overrides=overrides, hooks=[counter]).train()
    assert max(counter.counts) == 320


def test_absgrad_sums_absolute_per_pixel_gradients():
    """``means2d.absgrad`` = sum over pixels of |d loss_pixel / d means2d|, checked pixel by pixel."""
    g = torch.Generator().manual_seed(3)
    n, size = 5, 6
    means = (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor([0.6, 0.6, 0.2]) + torch.tensor([0.0, 0.0, 3.0])
    quats = torch.randn(n, 4, generator=g)
    scales = torch.rand(n, 3, generator=g) * 0.2 + 0.1
    opacities = torch.rand(n, generator=g) * 0.5 + 0.4
    colors = torch.rand(n, 3, generator=g)
    for tensor in (means, quats, scales, opacities, colors):
        tensor.requires_grad_()
    viewmats, Ks = torch.eye(4)[None], torch.tensor([[[8.0, 0, 3], [0, 8.0, 3], [0, 0, 1]]])
    weights = torch.randn(1, size, size, 3, generator=g)

    def render(absgrad: bool):
        image, _, info = rasterize(means, quats, scales, opacities, colors, viewmats, Ks, size, size, absgrad=absgrad)
        info["means2d"].retain_grad()
        return image, info

    image, info = render(absgrad=True)
    (image * weights).sum().backward()
    expected = torch.zeros(1, n, 2)
    for y in range(size):
        for x in range(size):
            pixel_image, pixel_info = render(absgrad=False)
            (pixel_image[0, y, x] * weights[0, y, x]).sum().backward()
            expected += pixel_info["means2d"].grad.abs()
    assert expected.sum() > 0
    torch.testing.assert_close(info["means2d"].absgrad, expected, rtol=1e-5, atol=1e-8)
    assert (info["means2d"].absgrad >= info["means2d"].grad.abs() - 1e-7).all()


def test_absgrad_densification_runs_with_the_torch_renderer(tmp_path):
    counter = CountAfterStep()
    overrides = ["strategy.absgrad=true", "strategy.refine_start_iter=1", "strategy.refine_every=2"]
    make_trainer(tmp_path, "run", steps=4, overrides=overrides, hooks=[counter]).train()
    assert counter.counts[-1] > 300
