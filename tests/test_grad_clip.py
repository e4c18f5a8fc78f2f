"""GradClipHook: each mode clips at its threshold, chosen groups only, history kept on resume."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from resume_check import assert_same_run, straight_and_resumed, single_thread  # noqa: F401
from splattrain.errors import ConfigError
from splattrain.hooks import GradClipHook

GROUPS = ("means", "scales", "opacities")


def fake_trainer():
    params = torch.nn.ParameterDict({name: torch.nn.Parameter(torch.zeros(4, 3)) for name in GROUPS})
    params["shN"] = torch.nn.Parameter(torch.zeros(4, 0, 3))  # SH degree 0: no coefficients
    params["shN"].grad = torch.zeros(4, 0, 3)
    return SimpleNamespace(model=SimpleNamespace(params=params), runtime_info={}, step=0)


def backward(trainer, hook, norm, step=1, outputs=None):
    """Give the parameters gradients of total 2-norm ``norm`` (a fixed direction), then run the hook."""
    direction = torch.arange(1.0, 1.0 + 12 * len(GROUPS)).reshape(len(GROUPS), 4, 3)
    direction /= direction.norm()
    for index, name in enumerate(GROUPS):
        trainer.model.params[name].grad = direction[index] * norm
    trainer.step = step
    hook.after_backward(trainer, step, outputs or {})
    return torch.cat([trainer.model.params[name].grad.flatten() for name in GROUPS]).norm().item()


def test_pre_defined_clips_to_max_norm():
    trainer, hook = fake_trainer(), GradClipHook(mode="pre_defined", max_norm=2.0)
    hook.before_train(trainer)
    assert backward(trainer, hook, 5.0) == pytest.approx(2.0, rel=1e-6)
    assert float(trainer.runtime_info["grad_norm/before"]) == pytest.approx(5.0, rel=1e-6)
    assert float(trainer.runtime_info["grad_norm/after"]) == pytest.approx(2.0, rel=1e-6)
    assert backward(trainer, hook, 1.5, step=2) == pytest.approx(1.5, rel=1e-6)  # below: untouched
    assert hook.clipped == 1


def test_inf_norm_clips_the_largest_entry():
    trainer, hook = fake_trainer(), GradClipHook(mode="pre_defined", max_norm=0.1, norm_type=float("inf"))
    backward(trainer, hook, 5.0)
    largest = max(trainer.model.params[name].grad.abs().max().item() for name in GROUPS)
    assert largest == pytest.approx(0.1, rel=1e-6)


def test_only_the_chosen_groups_are_clipped():
    trainer, hook = fake_trainer(), GradClipHook(mode="pre_defined", max_norm=0.5, groups=["scales"])
    hook.before_train(trainer)
    backward(trainer, hook, 5.0)
    assert trainer.model.params["scales"].grad.norm().item() == pytest.approx(0.5, rel=1e-6)
    means = trainer.model.params["means"].grad
    assert means.norm().item() > 0.5  # untouched


def test_average_clips_at_tolerance_times_the_mean_of_applied_norms():
    trainer, hook = fake_trainer(), GradClipHook(mode="average", tolerance=2.0)
    assert backward(trainer, hook, 1.0, 1) == pytest.approx(1.0)  # no history yet: not clipped
    assert backward(trainer, hook, 1.5, 2) == pytest.approx(1.5)  # threshold 2 x 1.0
    assert hook.threshold() == pytest.approx(2.5)  # 2 x mean(1.0, 1.5)
    assert backward(trainer, hook, 10.0, 3) == pytest.approx(2.5, rel=1e-6)
    assert hook.threshold() == pytest.approx(2.0 * (1.0 + 1.5 + 2.5) / 3)  # the applied norm counts


def test_moving_average_clips_at_tolerance_times_the_moving_average():
    trainer, hook = fake_trainer(), GradClipHook(mode="moving_average", tolerance=1.5, momentum=0.5)
    backward(trainer, hook, 2.0, 1)  # m = 2
    assert backward(trainer, hook, 4.0, 2) == pytest.approx(3.0, rel=1e-6)  # clipped at 1.5 x 2
    assert hook.average == pytest.approx(2.5)  # 0.5 x 2 + 0.5 x 3
    assert backward(trainer, hook, 1.0, 3) == pytest.approx(1.0)  # threshold 3.75: not clipped
    assert float(trainer.runtime_info["grad_norm/threshold"]) == pytest.approx(3.75)
    assert hook.average == pytest.approx(1.75)


def test_skipped_steps_are_left_alone():
    trainer, hook = fake_trainer(), GradClipHook(mode="pre_defined", max_norm=1.0)
    assert backward(trainer, hook, 5.0, outputs={"skip_update": True}) == pytest.approx(5.0)
    assert hook.count == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [({"mode": "value"}, "mode 'value'"), ({"mode": "pre_defined"}, "needs max_norm"),
     ({"mode": "average", "tolerance": 0.5}, "tolerance"), ({"mode": "moving_average", "momentum": 0.0}, "momentum")],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GradClipHook(**kwargs)


def test_unknown_group_is_refused():
    with pytest.raises(ConfigError, match="colors not a parameter group"):
        GradClipHook(mode="pre_defined", max_norm=1.0, groups=["colors"]).before_train(fake_trainer())


def test_resume_keeps_the_clipping_history(tmp_path):
    extra = "custom_hooks:\n  - {type: GradClipHook, mode: moving_average, tolerance: 1.0, momentum: 0.3}\n"
    straight, resumed = straight_and_resumed(tmp_path, extra=extra)
    hook = next(h for h in straight.hooks.hooks if isinstance(h, GradClipHook))
    assert hook.count == 12 and hook.clipped > 0
    assert_same_run(straight, resumed, hooks=["GradClipHook"])
