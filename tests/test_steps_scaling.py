"""trainer.steps_scaler / trainer.schedule_steps scale every step setting; late resets are refused."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import REPO
from splattrain.config import config_to_yaml
from splattrain.engine import load_config, load_run_config
from splattrain.engine.step_scaling import check_schedule
from splattrain.errors import ConfigError
from splattrain.registry import STRATEGIES
from splattrain.steps import Steps
from splattrain.strategy import build_strategy
from splattrain.strategy.default import DefaultStrategy
from test_cli import assert_one_line_error, run_cli

DEMO = REPO / "configs" / "demo.yaml"


def test_steps_scaler_scales_every_step_setting(tmp_path: Path) -> None:
    config = tmp_path / "scaled.yaml"  # the settings in a file: they follow the scaler (overrides do not)
    text = DEMO.read_text().replace("path: data/demo", f"path: {REPO / 'data' / 'demo'}")
    config.write_text(text.replace("optim:\n", "optim:\n  schedules:\n    scales: {type: step, milestones: [600, 1200]}\n"
                                                 "    sh0: {type: exp, min_ratio: 0.1, stop_max: 800}\n"))
    cfg = load_config(config, ["trainer.steps_scaler=0.5"])
    assert cfg.trainer.max_steps == 1000
    s = cfg.strategy
    assert (s.refine_start_iter, s.refine_stop_iter, s.refine_every, s.reset_every) == (100, 750, 50, 500)
    assert s.get("pause_refine_after_reset", 0) == 0 and s.get("refine_scale2d_stop_iter", 0) == 0  # zero stays off
    assert cfg.model.sh_degree_interval == 250 and cfg.trainer.val_interval == 750
    assert list(cfg.optim.schedules.scales.milestones) == [300, 600]
    assert cfg.optim.schedules.sh0.stop_max == 800  # a bound for any run length: not scaled
    assert cfg.default_hooks.checkpoint.interval == 500 and cfg.default_hooks.logger.interval == 50  # hooks too
    assert cfg.trainer.steps_scaler == 1.0 and cfg.trainer.schedule_steps is None  # applied once


def test_a_setting_given_on_the_command_line_is_never_scaled() -> None:
    run = load_run_config(DEMO, ["trainer.max_steps=400", "trainer.val_interval=400",
                                 "default_hooks.checkpoint.interval=1000", "strategy.refine_stop_iter=350"])
    cfg = run.cfg
    assert cfg.trainer.val_interval == 400 and cfg.default_hooks.checkpoint.interval == 1000
    assert cfg.strategy.refine_stop_iter == 350 and cfg.strategy.reset_every == 200  # the file's 1000, scaled
    assert "model.sh_degree_interval 100 (500 scaled by 400/2000)" in run.scaled
    assert not any(line.startswith(("trainer.val_interval", "default_hooks.checkpoint", "strategy.refine_stop_iter"))
                   for line in run.scaled)
    # a hook list given whole on the command line keeps its steps too; the same list in a file follows the run
    hooks = "custom_hooks=[{type: ContributionPruneHook, steps: [300]}]"
    assert list(load_config(DEMO, ["trainer.max_steps=400", hooks]).custom_hooks[0].steps) == [300]
    plain = load_run_config(REPO / "configs" / "colmap.yaml", ["data.path=x", "trainer.schedule_steps=null",
                                                               "trainer.max_steps=500"])
    assert plain.scaled == () and plain.cfg.strategy.refine_stop_iter == 4000  # no schedule_steps: nothing scaled


def test_the_scaled_settings_are_shown_and_an_explicit_interval_validates_once(tmp_path: Path) -> None:
    overrides = ["trainer.max_steps=40", "trainer.val_interval=40", "data.downscale=4", "model.init.num_points=500",
                 "metrics.lpips=false", f"output_dir={tmp_path / 'run'}"]
    dry = run_cli("fit", "--config", str(DEMO), *overrides, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "scaled: model.sh_degree_interval 10 (500 scaled by 40/2000)" in dry.stdout
    assert "val_interval" not in "".join(line for line in dry.stdout.splitlines() if line.startswith("scaled:"))
    done = run_cli("fit", "--config", str(DEMO), *overrides, "--quiet")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if any(key.startswith("val/") for key in row)] == [40]
    assert "step settings scaled to the run: model.sh_degree_interval 10 (500 scaled by 40/2000)" in \
        (tmp_path / "run" / "log.txt").read_text()


def test_schedule_steps_makes_settings_follow_max_steps(tmp_path: Path) -> None:
    cfg = load_config(DEMO, ["trainer.max_steps=1000"])  # the preset says: written for 2000 steps
    assert cfg.trainer.max_steps == 1000 and cfg.strategy.reset_every == 500 and cfg.strategy.refine_stop_iter == 750
    # refine_every is a statistics window (views per decision), not a point in the run: it stays
    assert cfg.strategy.refine_every == 100 and cfg.model.sh_degree_interval == 250
    colmap = load_config(REPO / "configs" / "colmap.yaml", ["data.path=x", "trainer.max_steps=2000"])
    assert (colmap.strategy.refine_every, colmap.strategy.refine_start_iter, colmap.strategy.reset_every) == (100, 143, 2000)
    # the COLMAP preset: no opacity reset within refinement at any length, every SH degree from the start
    assert colmap.strategy.reset_every > colmap.strategy.refine_stop_iter and colmap.model.sh_degree_interval == 0
    saved = tmp_path / "config.yaml"
    saved.write_text(config_to_yaml(cfg))  # the run dir's config.yaml reproduces the run exactly
    assert OmegaConf.to_container(load_config(saved)) == OmegaConf.to_container(cfg)


def test_user_strategy_declares_its_step_options(tmp_path: Path) -> None:
    @STRATEGIES.register("test_stepped")
    @dataclass
    class Stepped(DefaultStrategy):
        warm_steps: Steps = 400
        threshold: float = 0.5

    try:
        cfg = load_config(DEMO, ["strategy.type=test_stepped", "trainer.steps_scaler=0.25"])
        assert cfg.strategy.warm_steps == 100 and "threshold" not in cfg.strategy
        assert build_strategy(OmegaConf.to_container(cfg.strategy)).warm_steps == 100
    finally:
        STRATEGIES.unregister("test_stepped")


def test_a_step_count_left_unmarked_is_refused_not_silently_unscaled() -> None:
    @STRATEGIES.register("test_unmarked")
    @dataclass
    class Unmarked(DefaultStrategy):
        warm_steps: int = 400

    try:
        with pytest.raises(ConfigError, match="warm_steps look like step counts; annotate each Steps"):
            load_config(DEMO, ["strategy.type=test_unmarked", "trainer.max_steps=1000"])
    finally:
        STRATEGIES.unregister("test_unmarked")


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
