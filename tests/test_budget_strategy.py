"""The budget strategy: growth toward a target count, score-based choice, ``auto``, resume."""

from __future__ import annotations

import pytest
import torch

from resume_check import CountAfterStep, assert_same_run, make_trainer, single_thread, straight_and_resumed  # noqa: F401
from splattrain.errors import ConfigError
from splattrain.strategy import BudgetStrategy, build_strategy

#: Refinement every 2 steps from step 2 to step 10 of 12, no pruning: every refinement adds exactly
#: what the curve asks for.
BUDGET = ["strategy.type=budget", "strategy.refine_start_iter=1", "strategy.refine_every=2",
          "strategy.refine_stop_iter=10", "strategy.prune_opa=0.0", "strategy.reset_every=1000"]


def test_the_target_rises_from_the_start_count_to_the_budget():
    strategy = BudgetStrategy(budget=1000, refine_start_iter=100, refine_stop_iter=1100)
    targets = [strategy.target(step, 300) for step in range(100, 1200, 100)]
    assert targets[0] == 300 and targets[-1] == 1000 and targets == sorted(targets)
    assert targets[5] == round(300 + 700 * (1 - 0.5 ** 2))  # half way: three quarters of the growth
    assert strategy.target(600, 5000) == 1000  # a larger start only shrinks (by pruning)
    strategy.max_gaussians = 800  # a cap a hook set wins
    assert strategy.target(1100, 300) == 800


def test_growth_follows_the_target_exactly(tmp_path):
    counter = CountAfterStep()
    trainer = make_trainer(tmp_path, "run", steps=12, overrides=BUDGET + ["strategy.budget=420"], hooks=[counter])
    trainer.train()
    strategy = trainer.strategy
    expected = [300]
    for step in range(1, 13):
        refined = 1 < step < 10 and step % 2 == 0
        expected.append(strategy.target(step, 300) if refined else expected[-1])
    assert counter.counts == expected[1:]
    assert counter.counts[-1] == strategy.target(8, 300) < 420  # the last refinement is at step 8
    assert strategy.target(10, 300) == 420


def test_auto_budget_comes_from_the_training_pixels(tmp_path):
    trainer = make_trainer(tmp_path, "run", steps=1, overrides=BUDGET + ["strategy.pixels_per_gaussian=20"])
    pixels = sum(c.width * c.height for c in trainer.data.train_cameras)
    assert pixels == 48 * 16 * 16
    assert trainer.strategy.resolved_budget == round(pixels / 20)


def test_the_highest_scores_are_chosen_and_unseen_ones_never():
    strategy = BudgetStrategy(budget=10)
    grad2d = torch.tensor([0.0, 5.0, 1.0, 3.0, 2.0, 0.0])
    params = {"opacities": torch.logit(torch.tensor([0.9, 0.1, 0.9, 0.5, 0.9, 0.9]))}
    chosen = strategy.highest_scores(params, {"grad2d": grad2d}, 2)
    # scores 0, 0.5, 0.9, 1.5, 1.8, 0: rows 4 and 3
    assert chosen.tolist() == [False, False, False, True, True, False]
    assert int(strategy.highest_scores(params, {"grad2d": grad2d}, 99).sum()) == 4  # only Gaussians with a gradient


def test_resume_with_the_budget_strategy_matches_a_straight_run(tmp_path):
    straight, resumed = straight_and_resumed(tmp_path, overrides=BUDGET + ["strategy.budget=420"])
    assert straight.model.num_gaussians > 300
    assert_same_run(straight, resumed)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"type": "budget", "budget": 0}, "'strategy.budget' must be a positive count or 'auto'"),
        ({"type": "budget", "budget": "lots"}, "'strategy.budget' must be a positive count or 'auto'"),
        ({"type": "budget", "pixels_per_gaussian": 0.0}, "'strategy.pixels_per_gaussian' must be > 0"),
    ],
)
def test_bad_budget_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        build_strategy(options, object())


def test_a_cap_set_during_the_run_leaves_the_configured_one_as_written():
    """``trainer.cap_gaussians`` bounds growth beside ``max_gaussians`` without rewriting it."""
    from splattrain.strategy import build_strategy

    for spec in ({"type": "default", "max_gaussians": 1000}, {"type": "mcmc", "max_gaussians": 1000}):
        strategy = build_strategy(spec, None)
        strategy.limit_growth(400)
        assert (strategy.max_gaussians, strategy.growth_limit, strategy.growth_cap) == (1000, 400, 400)
        strategy.limit_growth(5000)
        assert strategy.growth_cap == 1000 and strategy.max_gaussians == 1000
        strategy.limit_growth(None)
        assert (strategy.growth_limit, strategy.growth_cap) == (None, 1000)
    uncapped = build_strategy({"type": "default"}, None)
    uncapped.limit_growth(300)
    assert (uncapped.max_gaussians, uncapped.growth_cap) == (0, 300)
