"""``strategy.refine_stop_max``: refinement ends by a fixed step however long the run, the bound
the COLMAP preset sets so that a longer run keeps fitting its Gaussians rather than growing more."""

from __future__ import annotations

import pytest

from conftest import REPO
from splattrain.engine import load_config
from splattrain.errors import ConfigError
from splattrain.strategy.budget import BudgetStrategy
from splattrain.strategy.build import build_strategy
from splattrain.strategy.default import DefaultStrategy

PRESET = REPO / "configs" / "colmap.yaml"


def test_the_bound_caps_the_end_of_refinement_and_zero_is_none():
    assert DefaultStrategy(refine_stop_iter=4571, refine_stop_max=2000).refine_stop_iter == 2000
    assert DefaultStrategy(refine_start_iter=2000, refine_stop_iter=16000, refine_stop_max=2000).refine_start_iter == 500
    assert DefaultStrategy(refine_start_iter=2000, refine_stop_iter=16000).refine_start_iter == 2000  # no bound
    assert DefaultStrategy(refine_stop_iter=1143, refine_stop_max=2000).refine_stop_iter == 1143
    assert DefaultStrategy(refine_stop_iter=4571).refine_stop_iter == 4571
    assert BudgetStrategy(refine_stop_iter=5000, refine_stop_max=2000).refine_stop_iter == 2000
    strategy = DefaultStrategy(refine_start_iter=500, refine_stop_iter=4571, refine_every=100, refine_stop_max=2000)
    assert not strategy.refines_at(2000) and strategy.refines_at(1900) and strategy.last_event_step(8000) == 1999
    with pytest.raises(ConfigError, match="strategy.refine_stop_max"):
        DefaultStrategy(refine_stop_max=-1)


@pytest.mark.parametrize("steps, start, end", [(1050, 75, 600), (2000, 143, 1143), (3500, 250, 2000), (7000, 500, 2000),
                                               (8000, 500, 2000), (28000, 500, 2000), (100000, 500, 2000)])
def test_the_colmap_preset_refines_for_four_sevenths_of_a_run_but_never_past_step_2000(steps, start, end):
    cfg = load_config(PRESET, ["data.path=x", f"trainer.max_steps={steps}"])
    assert cfg.strategy.refine_stop_max == 2000  # a fixed step: not scaled with the run
    strategy = build_strategy(cfg.strategy)
    assert (strategy.refine_start_iter, strategy.refine_stop_iter) == (start, end)
    # a long run still refines: its start (scaled to 2000 at 28000 steps) stays within the bound
    assert sum(strategy.refines_at(step) for step in range(steps)) >= (end - start) // strategy.refine_every - 1


def test_a_user_lifts_the_bound_with_zero():
    cfg = load_config(PRESET, ["data.path=x", "trainer.max_steps=7000", "strategy.refine_stop_max=0"])
    assert build_strategy(cfg.strategy).refine_stop_iter == 4000
