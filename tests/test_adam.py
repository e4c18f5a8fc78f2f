"""The compiled Adam (optim.fused) and its visible-only variant (optim.sparse)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from splattrain.optim.adam import GaussianAdam, step_adam, visible_gaussians
from splattrain.config.schema import OptimConfig
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel
from splattrain.optim import build_optimizers, step_optimizers
from splattrain.kernels import build

SHAPES = {"means": (500, 3), "quats": (500, 4), "opacities": (500,), "sh0": (500, 1, 3), "shN": (500, 15, 3),
          "empty": (500, 0, 3)}


@pytest.fixture(scope="module")
def library():
    try:
        return build.load_library()
    except build.BuildError as error:  # the fallback path is tested below either way
        pytest.fail(f"the CPU library must build on a machine with a compiler: {error}")


def _pairs(make, seed=0):
    gen = torch.Generator().manual_seed(seed)
    start = {k: torch.randn(s, generator=gen) for k, s in SHAPES.items()}
    made = []
    for factory in make:
        params = {k: torch.nn.Parameter(v.clone()) for k, v in start.items()}
        optimizers = {k: factory([{"params": [p], "lr": 0.01 * (i + 1), "name": k}])
                      for i, (k, p) in enumerate(params.items())}
        made.append((params, optimizers))
    return made


def _steps(made, steps, visible=None, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        grads = {k: torch.randn(s, generator=gen) for k, s in SHAPES.items()}
        for params, optimizers in made:
            for k, p in params.items():
                p.grad = None if (k == "quats" and step == 2) else grads[k].clone()  # a step without a gradient
            fused = [o for o in optimizers.values() if isinstance(o, GaussianAdam)]
            if fused:
                step_adam(fused, visible)
            for o in optimizers.values():
                if not isinstance(o, GaussianAdam):
                    o.step()
            if step == 4:  # a momentum schedule changes beta1, above and below 0.5
                for o in optimizers.values():
                    o.param_groups[0]["betas"] = (0.3 if o.param_groups[0]["name"] == "sh0" else 0.8, 0.999)


def test_fused_adam_matches_torch_adam(library):
    made = _pairs([
        lambda g: torch.optim.Adam(g, eps=1e-15),
        lambda g: GaussianAdam(g, eps=1e-15, library=library),
        lambda g: GaussianAdam(g, eps=1e-15, library=None),  # PyTorch operations
    ])
    _steps(made, 12)
    (ref, ref_opt), (fused, fused_opt), (plain, plain_opt) = made
    for k in SHAPES:
        torch.testing.assert_close(fused[k], ref[k], rtol=1e-5, atol=1e-5)
        assert torch.equal(plain[k], ref[k]), k  # the same operations as torch's single-tensor Adam
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(fused_opt[k].state[fused[k]][key], ref_opt[k].state[ref[k]][key],
                                       rtol=1e-5, atol=1e-6)
    assert ref_opt["quats"].state[ref["quats"]]["step"].item() == 11
    assert fused_opt["quats"].state[fused["quats"]]["step"].item() == 11
    assert (fused["means"] != made[0][0]["means"].detach() + 1).all()


def test_state_dicts_are_interchangeable_with_torch_adam(library):
    made = _pairs([lambda g: torch.optim.Adam(g, eps=1e-15), lambda g: GaussianAdam(g, eps=1e-15, library=library)])
    _steps(made, 3)
    (ref, ref_opt), (fused, fused_opt) = made
    for k in SHAPES:
        theirs, ours = ref_opt[k].state_dict(), fused_opt[k].state_dict()
        assert theirs["param_groups"] == ours["param_groups"]
        assert theirs["state"].keys() == ours["state"].keys()
        # a torch Adam resumes from the fused one's state and the other way round
        fresh = GaussianAdam([{"params": [ref[k]], "lr": 1.0}], library=library)
        fresh.load_state_dict(theirs)
        assert fresh.param_groups[0]["lr"] == ref_opt[k].param_groups[0]["lr"]
        for key, value in theirs["state"][0].items():
            assert torch.equal(fresh.state[ref[k]][key], value)
        back = torch.optim.Adam([fused[k]], lr=1.0)
        back.load_state_dict(ours)
        assert torch.equal(back.state[fused[k]]["exp_avg"], fused_opt[k].state[fused[k]]["exp_avg"])


def test_sparse_adam_updates_only_visible_rows(library):
    visible = torch.rand(500, generator=torch.Generator().manual_seed(3)) < 0.4
    for lib in (library, None):
        made = _pairs([lambda g: GaussianAdam(g, eps=1e-15, library=lib),
                       lambda g: GaussianAdam(g, eps=1e-15, library=lib, sparse=True)])
        _steps(made, 1)  # no mask: a sparse optimizer steps every row, as a dense one does
        (dense, dense_opt), (sparse, sparse_opt) = made
        for k in SHAPES:
            assert torch.equal(sparse[k].detach(), dense[k].detach())
        after_first = {k: v.detach().clone() for k, v in sparse.items()}
        _steps(made, 3, visible=visible, seed=5)
        for k in ("means", "opacities", "shN"):
            assert torch.equal(sparse[k].detach()[~visible], after_first[k][~visible]), k
            moved = (sparse[k].detach() != after_first[k]).reshape(500, -1).any(1)
            assert moved[visible].all(), k
            # visible rows took the same three steps as the dense optimizer's (to rounding: the
            # compiled loop's vector body and scalar tail may round an operation differently)
            torch.testing.assert_close(sparse[k].detach()[visible], dense[k].detach()[visible], rtol=1e-6, atol=1e-7)
            assert not torch.equal(sparse_opt[k].state[sparse[k]]["exp_avg"][~visible],
                                   dense_opt[k].state[dense[k]]["exp_avg"][~visible])


def test_sparse_rows_keep_their_values_exactly(library):
    visible = torch.zeros(500, dtype=torch.bool)
    visible[::3] = True
    made = _pairs([lambda g: GaussianAdam(g, eps=1e-15, library=library, sparse=True)])
    _steps(made, 1)
    params, optimizers = made[0]
    before = {k: (p.detach().clone(), optimizers[k].state[p]["exp_avg"].clone()) for k, p in params.items()}
    _steps(made, 2, visible=visible, seed=9)
    for k, p in params.items():
        value, exp_avg = before[k]
        assert torch.equal(p.detach()[~visible], value[~visible]), k
        assert torch.equal(optimizers[k].state[p]["exp_avg"][~visible], exp_avg[~visible]), k
        if p.numel():
            assert not torch.equal(p.detach()[visible], value[visible]), k


def test_visible_gaussians_from_render_infos():
    radii = torch.zeros(2, 5, 2, dtype=torch.int32)
    radii[0, 1] = 3
    radii[1, 3] = torch.tensor([2, 0])  # one axis culled: not visible
    radii[1, 4] = 1
    other = {"radii": torch.tensor([[[1, 1], [0, 0], [0, 0], [0, 0], [0, 0]]], dtype=torch.int32)}
    assert visible_gaussians([{"radii": radii}, other]).tolist() == [True, True, False, False, True]
    assert visible_gaussians([{}]) is None


def test_build_optimizers_follows_optim_fused(library):
    model = GaussianModel.random(50, torch.zeros(3), 1.0, 1, generator=torch.Generator().manual_seed(0))
    cfg = OmegaConf.structured(OptimConfig)
    assert all(isinstance(o, GaussianAdam) and o.library is not None for o in build_optimizers(model, cfg, 1.0).values())
    cfg.fused = "false"
    assert all(type(o) is torch.optim.Adam for o in build_optimizers(model, cfg, 1.0).values())
    cfg.sparse = True
    sparse = build_optimizers(model, cfg, 1.0)
    assert all(isinstance(o, GaussianAdam) and o.sparse and o.library is None for o in sparse.values())
    cfg.fused = "sometimes"
    with pytest.raises(ConfigError, match="optim.fused"):
        build_optimizers(model, cfg, 1.0)


def test_step_optimizers_uses_the_renders_visibility(library):
    model = GaussianModel.random(50, torch.zeros(3), 1.0, 1, generator=torch.Generator().manual_seed(0))
    cfg = OmegaConf.merge(OmegaConf.structured(OptimConfig), {"sparse": True})
    optimizers = build_optimizers(model, cfg, 1.0)
    before = model.params["means"].detach().clone()
    for p in model.params.values():
        p.grad = torch.ones_like(p)
    radii = torch.zeros(1, 50, 2, dtype=torch.int32)
    radii[0, :10] = 2
    step_optimizers(optimizers, [{"radii": radii}])
    moved = (model.params["means"].detach() != before).any(1)
    assert moved[:10].all() and not moved[10:].any()
