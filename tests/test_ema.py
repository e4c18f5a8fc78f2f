"""EMAHook: the averaging rules, index alignment through densification, swapping, checkpoints, resume."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from resume_check import assert_same_run, straight_and_resumed, single_thread  # noqa: F401
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.config.schema import OptimConfig
from splattrain.engine.shadow import ShadowWeights
from splattrain.hooks import EMAHook
from splattrain.model.gaussians import GaussianModel
from splattrain.optim import build_optimizers
from splattrain.render import TorchRenderer
from splattrain.strategy import build_strategy

def with_shadow(trainer: SimpleNamespace) -> SimpleNamespace:
    """``trainer`` with the engine's shadow weights and ``keep_shadow``, as the DefaultTrainer has them."""
    trainer.shadow = ShadowWeights()

    def keep_shadow(names, validate=True, export=True):
        tensors = trainer.shadow.keep(trainer.model.params, names, validate, export)
        trainer.on_gaussians_moved(trainer.shadow.follow)
        return tensors

    trainer.keep_shadow = keep_shadow
    return trainer


def scalar_trainer(value: float):
    params = torch.nn.ParameterDict({"means": torch.nn.Parameter(torch.full((2, 3), value))})
    return with_shadow(SimpleNamespace(model=SimpleNamespace(params=params), on_gaussians_moved=lambda listener: None,
                                       step=0))


def run_values(hook: EMAHook, values):
    """Start at values[0], then one training step per later value; the averaged means, per step."""
    trainer = scalar_trainer(values[0])
    hook.before_train(trainer)
    out = []
    for step, value in enumerate(values[1:], start=1):
        trainer.model.params["means"].data.fill_(value)
        hook.after_train_iter(trainer, step, {}, {})
        out.append(hook.averaged["means"][0, 0].item())
    return out


def test_ema_weighs_the_new_value_by_momentum():
    assert run_values(EMAHook(momentum=0.25), [0.0, 4.0, 8.0]) == pytest.approx([1.0, 0.75 * 1.0 + 0.25 * 8.0])


def test_swa_is_the_plain_mean():
    assert run_values(EMAHook(variant="swa"), [0.0, 3.0, 6.0, 3.0]) == pytest.approx([1.5, 3.0, 3.0])


def test_momentum_annealing_starts_as_a_mean_and_ends_at_momentum():
    got = run_values(EMAHook(variant="momentum_annealing", momentum=0.3, gamma=1.0), [0.0, 2.0, 5.0, 10.0])
    # weights max(0.3, 1 / (1 + n)) for n = 1, 2, 3 updates so far: 1/2, 1/3, then 0.3
    first = 0.5 * 2.0
    second = first + (5.0 - first) / 3.0
    assert got == pytest.approx([first, second, second + 0.3 * (10.0 - second)])


def test_interval_and_begin():
    # before step 3 the average copies the parameters; then it averages every 2nd step only
    got = run_values(EMAHook(momentum=0.5, interval=2, begin=3), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert got == pytest.approx([1.0, 2.0, 2.0, 3.0, 3.0])


def densification_setup():
    """Six Gaussians: 0 is cloned (small, high gradient), 1 split (large, high gradient), 2 pruned."""
    n = 6
    means = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3) / 10
    model = GaussianModel.from_points(means, torch.rand(n, 3), sh_degree=0, opacity=0.9)
    with torch.no_grad():
        model.params["scales"][:] = math.log(0.005)
        model.params["scales"][1] = math.log(0.05)
        model.params["opacities"][2] = torch.logit(torch.tensor(0.001))
    optimizers = build_optimizers(model, OmegaConf.structured(OptimConfig), scene_scale=1.0)
    strategy = build_strategy({"type": "default"}, TorchRenderer())
    state = strategy.initialize_state(scene_scale=1.0)
    state["grad2d"] = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    state["count"] = torch.ones(n)
    trainer = with_shadow(SimpleNamespace(model=model, strategy=strategy, on_gaussians_moved=strategy.add_reindex_listener,
                                          step=0))
    return trainer, optimizers, state


def test_averages_follow_their_gaussians_through_clone_split_and_prune():
    trainer, optimizers, state = densification_setup()
    hook = EMAHook(momentum=0.5)
    hook.before_train(trainer)
    params = trainer.model.params
    for name in hook.averaged:  # averages that differ from the parameters, one distinct value per row
        rows = torch.arange(6.0).view(-1, *[1] * (params[name].dim() - 1))
        hook.averaged[name] = params[name].detach() + 100.0 + rows
    hook.updates = torch.tensor([5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    old_means, old_average = params["means"].detach().clone(), hook.averaged["means"].clone()

    trainer.strategy.grow(params, optimizers, state, step=600)
    trainer.strategy.prune(params, optimizers, state, step=600)

    # rows now: originals 0, 3, 4, 5; the clone of 0; the two halves of 1 (2 was pruned)
    means, average = params["means"].detach(), hook.averaged["means"]
    assert len(means) == 7 and all(len(a) == 7 for a in hook.averaged.values())
    for row, gaussian in enumerate([0, 3, 4, 5]):
        assert torch.equal(means[row], old_means[gaussian])
        assert torch.equal(average[row], old_average[gaussian])  # kept its own average
    for row in (4, 5, 6):  # clone and split halves start from their current values
        for name, values in hook.averaged.items():
            assert torch.equal(values[row], params[name][row].detach()), (name, row)
    assert torch.equal(means[4], old_means[0])  # the clone sits on its parent
    assert not torch.equal(means[5], old_means[1])  # the halves moved
    assert hook.updates.tolist() == [5.0, 8.0, 9.0, 10.0, 1.0, 1.0, 1.0]


def test_validation_swaps_the_average_in_and_out():
    trainer = scalar_trainer(1.0)
    hook = EMAHook(momentum=0.5)
    hook.before_train(trainer)
    trainer.model.params["means"].data.fill_(3.0)
    hook.after_train_iter(trainer, 1, {}, {})  # average 2.0
    params, shadow = trainer.model.params, trainer.shadow
    with shadow.for_validation(params):
        assert params["means"].detach().eq(2.0).all()
        state = {"means": params["means"].detach().clone()}
        checkpoint = shadow.checkpoint_entries(state)  # saved mid-validation: still right
    assert checkpoint["gaussians"]["means"].eq(2.0).all()
    assert checkpoint["training_gaussians"]["means"].eq(3.0).all()
    assert params["means"].detach().eq(3.0).all()


def test_checkpoints_keep_training_weights_without_export_average():
    trainer = scalar_trainer(1.0)
    hook = EMAHook(momentum=0.5, export_average=False)
    hook.before_train(trainer)
    trainer.model.params["means"].data.fill_(3.0)
    hook.after_train_iter(trainer, 1, {}, {})
    checkpoint = trainer.shadow.checkpoint_entries({"means": torch.full((2, 3), 3.0)})
    assert checkpoint["gaussians"]["means"].eq(3.0).all()
    assert checkpoint["shadow_gaussians"]["means"].eq(2.0).all()
    assert set(hook.state_dict()) == {"updates"}  # the averages are the engine's to save


def test_resume_with_ema_matches_a_straight_run(tmp_path):
    extra = "custom_hooks:\n  - {type: EMAHook, momentum: 0.2}\n"
    straight, resumed = straight_and_resumed(tmp_path, extra=extra)
    assert straight.model.num_gaussians != 300  # densification happened
    assert_same_run(straight, resumed, hooks=["EMAHook"])
    hook = next(h for h in straight.hooks.hooks if isinstance(h, EMAHook))
    # after training the model holds the averages; checkpoints store them as their Gaussians
    last = load_checkpoint_file(tmp_path / "straight" / "ckpt" / "step_000012.pt")
    for name, value in straight.model.params.items():
        assert torch.equal(value.detach(), hook.averaged[name])
        assert torch.equal(last["gaussians"][name], hook.averaged[name])
    assert not torch.equal(last["training_gaussians"]["means"], last["gaussians"]["means"])


def test_removal_outside_densification_is_followed_or_refused():
    trainer, optimizers, state = densification_setup()
    hook = EMAHook(momentum=0.5)
    hook.before_train(trainer)
    params = trainer.model.params
    hook.averaged["means"] += torch.arange(6.0)[:, None]
    expected = hook.averaged["means"][[0, 2, 3, 5]].clone()
    drop = torch.tensor([False, True, False, False, True, False])
    trainer.strategy.remove_gaussians(params, optimizers, state, drop)
    assert torch.equal(hook.averaged["means"], expected) and len(state["grad2d"]) == 4
    with torch.no_grad():  # a hook that drops rows without telling anyone
        params["means"] = torch.nn.Parameter(params["means"][:3])
    with pytest.raises(RuntimeError, match="remove_gaussians"):
        hook.after_train_iter(trainer, 1, {}, {})
