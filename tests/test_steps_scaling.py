"""trainer.steps_scaler / trainer.schedule_steps scale every step setting; late resets are refused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import REPO
from splattrain.config import config_to_yaml, load_config
from splattrain.config.steps import check_schedule
from splattrain.errors import ConfigError
from splattrain.registry import STRATEGIES
from splattrain.strategy import build_strategy
from splattrain.strategy.default import DefaultStrategy
from test_cli import assert_one_line_error, run_cli

DEMO = REPO / "configs" / "demo.yaml"


def test_steps_scaler_scales_every_step_setting() -> None:
    cfg = load_config(DEMO, ["trainer.steps_scaler=0.5", "optim.schedules.scales.type=step",
                             "optim.schedules.scales.milestones=[600,1200]"])
    assert cfg.trainer.max_steps == 1000
    s = cfg.strategy
    assert (s.refine_start_iter, s.refine_stop_iter, s.refine_every, s.reset_every) == (100, 750, 50, 500)
    assert s.pause_refine_after_reset == 0 and s.refine_scale2d_stop_iter == 0  # zero stays off
    assert cfg.model.sh_degree_interval == 250 and cfg.trainer.val_interval == 200
    assert list(cfg.optim.schedules.scales.milestones) == [300, 600]
    assert cfg.trainer.steps_scaler == 1.0 and cfg.trainer.schedule_steps is None  # applied once


def test_schedule_steps_makes_settings_follow_max_steps(tmp_path: Path) -> None:
    cfg = load_config(DEMO, ["trainer.max_steps=1000"])  # the preset says: written for 2000 steps
    assert cfg.trainer.max_steps == 1000 and cfg.strategy.reset_every == 500 and cfg.strategy.refine_stop_iter == 750
    # refine_every is a statistics window (views per decision), not a point in the run: it stays
    assert cfg.strategy.refine_every == 100 and cfg.model.sh_degree_interval == 250
    colmap = load_config(REPO / "configs" / "colmap.yaml", ["data.path=x", "trainer.max_steps=2000"])
    assert (colmap.strategy.refine_every, colmap.strategy.refine_start_iter, colmap.strategy.reset_every) == (100, 143, 857)
    saved = tmp_path / "config.yaml"
    saved.write_text(config_to_yaml(cfg))  # the run dir's config.yaml reproduces the run exactly
    assert OmegaConf.to_container(load_config(saved)) == OmegaConf.to_container(cfg)


def test_user_strategy_declares_its_step_options(tmp_path: Path) -> None:
    @STRATEGIES.register("test_stepped")
    @dataclass
    class Stepped(DefaultStrategy):
        warm_steps: int = 400
        threshold: float = 0.5
        step_options = DefaultStrategy.step_options + ("warm_steps",)

    try:
        cfg = load_config(DEMO, ["strategy.type=test_stepped", "trainer.steps_scaler=0.25"])
        assert cfg.strategy.warm_steps == 100 and "threshold" not in cfg.strategy
        assert build_strategy(OmegaConf.to_container(cfg.strategy)).warm_steps == 100
    finally:
        STRATEGIES.unregister("test_stepped")


@pytest.mark.parametrize("max_steps, refused", [(1000, True), (2000, False), (1040, True), (1060, False)])
def test_reset_in_the_last_five_percent_is_refused(max_steps: int, refused: bool) -> None:
    strategy = build_strategy({"type": "default", "refine_start_iter": 200, "refine_stop_iter": 1500,
                               "reset_every": 1000, "refine_every": 100})
    warnings: list = []
    if refused:
        with pytest.raises(ConfigError, match=f"opacity reset at step 1000 of {max_steps}"):
            check_schedule(strategy, max_steps, warnings.append)
    else:
        check_schedule(strategy, max_steps, warnings.append)
        assert all("reset" not in w for w in warnings)


def test_late_refinement_warns_and_events_match_the_strategy() -> None:
    strategy = build_strategy({"type": "default", "refine_start_iter": 20, "refine_stop_iter": 1000,
                               "reset_every": 30, "refine_every": 10, "pause_refine_after_reset": 5})
    warnings: list = []
    check_schedule(strategy, 100, warnings.append)  # the reset at 90 is before the last 5%
    assert len(warnings) == 1 and "refinement at step 100 of 100" in warnings[0]
    events = strategy.events(100)
    assert events["reset"] == [30, 60, 90] and events["refine"] == [40, 50, 70, 80, 100]
    # the strategy really refines and resets at those steps: count what step_post_backward does
    calls = {"refine": [], "reset": []}
    strategy.grow = lambda params, optimizers, state, step: calls["refine"].append(step) or (0, 0)
    strategy.prune = lambda *args: 0
    from splattrain.strategy import ops

    reset = ops.reset_opacity
    ops.reset_opacity = lambda *a, **k: calls["reset"].append(step)
    try:
        state = {"grad2d": torch.zeros(1), "count": torch.zeros(1)}
        strategy.accumulate = lambda *a: None
        for step in range(1, 101):
            strategy.step_post_backward({}, {}, state, step, {})
    finally:
        ops.reset_opacity = reset
    assert calls == events
    mcmc = build_strategy({"type": "mcmc", "max_gaussians": 10, "refine_start_iter": 50, "refine_every": 25})
    warnings.clear()
    check_schedule(mcmc, 100, warnings.append)
    assert mcmc.events(100) == {"refine": [75, 100]} and "step 100 of 100" in warnings[0]


def test_fit_refuses_a_reset_at_the_last_step_before_training(tmp_path: Path) -> None:
    unscaled = ("trainer.max_steps=1000", "trainer.schedule_steps=null")
    result = run_cli("fit", "--config", str(DEMO), *unscaled, f"output_dir={tmp_path / 'run'}")
    assert_one_line_error(result, "opacity reset at step 1000 of 1000", "trainer.schedule_steps")
    assert not (tmp_path / "run").exists()
    shown = run_cli("schedule", "--config", str(DEMO), "trainer.max_steps=1000")  # the preset's own scaling
    assert shown.returncode == 0 and "reset: 500" in shown.stdout and "no reset or refinement in the last 5%" in shown.stdout
