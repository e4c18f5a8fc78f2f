"""Learning-rate / momentum schedules against closed forms, the config wiring, and `splattrain schedule`."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from conftest import DEMO
from splattrain.cli import main
from splattrain.commands.schedule import schedule_table
from splattrain.engine import load_config
from splattrain.config.schema import OptimConfig
from splattrain.errors import ConfigError
from splattrain.model.gaussians import GaussianModel, degree_for_step
from splattrain.optim import build_optimizers, build_schedulers
from splattrain.optim.schedules import build_schedule

T = 100


def small_model() -> GaussianModel:
    return GaussianModel.from_points(torch.rand(20, 3), torch.rand(20, 3), sh_degree=0)


def factors(spec, steps, total=T):
    schedule = build_schedule(spec, total, "test")
    return [schedule.factor(t) for t in steps]


def cos_anneal(start, end, pct):
    return end + (start - end) * (1 + math.cos(math.pi * pct)) / 2


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"type": "fixed"}, {0: 1.0, 50: 1.0, 100: 1.0}),
        ({"type": "step", "milestones": [30, 60], "gamma": 0.1}, {29: 1.0, 30: 0.1, 59: 0.1, 60: 0.01}),
        ({"type": "step", "step_size": 25, "gamma": 0.5}, {24: 1.0, 25: 0.5, 50: 0.25, 99: 0.125}),
        ({"type": "exp", "gamma": 0.99}, {0: 1.0, 10: 0.99**10, 73: 0.99**73}),
        ({"type": "exp", "min_ratio": 0.01}, {0: 1.0, 50: 0.1, 100: 0.01}),
        ({"type": "exp", "min_ratio": 0.01, "stop_max": 40}, {0: 1.0, 20: 0.1, 40: 0.01, 41: 0.01, 100: 0.01}),
        ({"type": "exp", "min_ratio": 0.01, "stop_max": 400}, {0: 1.0, 50: 0.1, 100: 0.01}),  # past the run: no bound
        ({"type": "poly", "power": 2.0, "min_ratio": 0.1}, {0: 1.0, 50: 0.9 * 0.25 + 0.1, 100: 0.1}),
        ({"type": "inv", "gamma": 0.1, "power": 0.5}, {0: 1.0, 30: 0.5, 80: 1 / 3}),
        ({"type": "cosine"}, {0: 1.0, 25: cos_anneal(1, 0, 0.25), 50: 0.5, 100: 0.0}),
        ({"type": "cosine", "min_ratio": 0.2}, {50: 0.6, 100: 0.2}),
        ({"type": "flat-cosine", "start_percent": 0.5}, {0: 1.0, 49: 1.0, 75: 0.5, 100: 0.0}),
        (
            {"type": "cosine-restart", "periods": [40, 60], "restart_weights": [1.0, 0.5]},
            {0: 1.0, 20: 0.5, 40: 0.5, 70: 0.25, 99: 0.5 * cos_anneal(1, 0, 59 / 60), 100: 0.0},
        ),
        (
            {"type": "cyclic", "target_ratio": [10.0, 1e-4], "cyclic_times": 2, "step_ratio_up": 0.4},
            {0: 1.0, 10: 5.5, 20: 10.0, 35: (10 + 1e-4) / 2, 50: 1.0, 60: 5.5},
        ),
        (
            {"type": "cyclic", "target_ratio": [4.0, 0.5], "anneal": "linear"},
            {0: 1.0, 20: 2.5, 40: 4.0, 70: 2.25},
        ),
        ({"type": "one-cycle"}, {0: 1 / 25, 29: 1.0, 64: cos_anneal(1.0, 4e-6, 0.5), 99: 4e-6}),
    ],
)
def test_schedule_matches_closed_form(spec, expected):
    got = factors(spec, list(expected))
    assert got == pytest.approx(list(expected.values()), rel=1e-9, abs=1e-12)


def test_linear_warmup_multiplies_any_schedule():
    plain = build_schedule({"type": "cosine"}, T, "test")
    warm = build_schedule({"type": "cosine", "warmup_steps": 10, "warmup_ratio": 0.1}, T, "test")
    assert warm.factor(0) == pytest.approx(0.1)
    assert warm.factor(5) == pytest.approx(plain.factor(5) * (0.1 + 0.9 * 5 / 10))
    assert warm.factor(10) == plain.factor(10)


@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_lr_and_beta1_match_torch(three_phase):
    param = torch.nn.Parameter(torch.zeros(1))
    adam = torch.optim.Adam([param], lr=1.0)
    reference = torch.optim.lr_scheduler.OneCycleLR(
        adam, max_lr=1.0, total_steps=T, pct_start=0.3, three_phase=three_phase, base_momentum=0.85, max_momentum=0.95
    )
    ours = build_schedule({"type": "one-cycle", "three_phase": three_phase, "momentum": [0.85, 0.95]}, T, "test")
    for t in range(T):
        group = adam.param_groups[0]
        assert ours.factor(t) == pytest.approx(group["lr"], rel=1e-9), t
        assert ours.momentum(t) == pytest.approx(group["betas"][0], rel=1e-9), t
        adam.step()
        reference.step()


def test_cyclic_beta1_moves_against_the_learning_rate():
    schedule = build_schedule(
        {"type": "cyclic", "cyclic_times": 2, "step_ratio_up": 0.4, "momentum": [0.85, 0.95]}, T, "test"
    )
    assert [schedule.momentum(t) for t in (0, 10, 20, 35, 50)] == pytest.approx([0.95, 0.9, 0.85, 0.9, 0.95])


def test_optimizers_follow_the_configured_schedules():
    cfg = OmegaConf.merge(
        OmegaConf.structured(OptimConfig),
        {"schedules": {"opacities": {"type": "one-cycle", "momentum": [0.85, 0.95]}, "scales": {"type": "cosine"}}},
    )
    optimizers = build_optimizers(small_model(), cfg, scene_scale=2.0)
    schedulers = build_schedulers(optimizers, cfg, scene_scale=2.0, max_steps=T)
    lr = lambda name: optimizers[name].param_groups[0]["lr"]  # noqa: E731
    assert lr("opacities") == pytest.approx(0.05 / 25)  # set for step 1 at build
    for scheduler in schedulers:
        scheduler.step(50)  # the rates step 51 uses
    # The 3DGS position decay is the default for means: lr_init * (lr_final / lr_init) ** (t / T).
    assert lr("means") == pytest.approx(1.6e-4 * 2.0 * (1.6e-6 / 1.6e-4) ** 0.5)
    assert lr("scales") == pytest.approx(5e-3 * 0.5)
    assert lr("quats") == 1e-3  # not scheduled
    assert optimizers["opacities"].param_groups[0]["betas"][0] == pytest.approx(
        build_schedule({"type": "one-cycle", "momentum": [0.85, 0.95]}, T, "t").momentum(50)
    )


def test_a_zero_means_rate_stays_zero():
    cfg = OmegaConf.merge(OmegaConf.structured(OptimConfig), {"means_lr": 0.0})
    optimizers = build_optimizers(small_model(), cfg, scene_scale=2.0)
    for scheduler in build_schedulers(optimizers, cfg, scene_scale=2.0, max_steps=T):
        scheduler.step(50)
    assert optimizers["means"].param_groups[0]["lr"] == 0.0


@pytest.mark.parametrize(
    "schedules, message",
    [
        ({"means": {"type": "linear"}}, "optim.schedules.means.type: 'linear' is not a schedule"),
        ({"scales": {"type": "cosine", "gamma": 0.1}}, "optim.schedules.scales: gamma not an option"),
        ({"scales": {"type": "step"}}, "either milestones"),
        ({"scales": {"type": "exp", "gamma": 0.9, "min_ratio": 0.1}}, "either gamma"),
        ({"scales": {"type": "exp", "gamma": 0.9, "stop_max": 10}}, "stop_max bounds the decay to min_ratio"),
        ({"scales": {"type": "exp", "min_ratio": 0.1, "stop_max": -1}}, "stop_max must be a step count"),
        ({"scales": {"type": "cosine", "momentum": [0.8, 0.9]}}, "momentum not an option"),
        ({"colors": {"type": "cosine"}}, "colors not a parameter group"),
    ],
)
def test_bad_schedules_name_the_key(schedules, message):
    cfg = OmegaConf.merge(OmegaConf.structured(OptimConfig), {"schedules": schedules})
    with pytest.raises(ConfigError, match=message):
        build_schedulers(build_optimizers(small_model(), cfg, 1.0), cfg, 1.0, T)


def test_sh_degree_schedule():
    assert [degree_for_step(s, 10, 2) for s in (1, 10, 11, 20, 21, 500)] == [0, 0, 1, 1, 2, 2]
    assert degree_for_step(1, 0, 3) == 3


def test_schedule_command_prints_and_plots(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(
        f"name: s\ndata: {{path: {DEMO}}}\ntrainer: {{max_steps: 200}}\nmodel: {{sh_degree_interval: 50}}\n"
        "optim:\n  schedules:\n    opacities: {type: one-cycle, momentum: [0.85, 0.95]}\n"
        "    scales: {type: step, milestones: [120], warmup_steps: 20}\n"
    )
    out = tmp_path / "plot.png"
    assert main(["schedule", "--config", str(config), "--out", str(out)]) == 0
    columns, rows = schedule_table(load_config(config))
    assert columns == ["step", "means lr (x scene scale)", "scales lr", "opacities lr", "opacities beta1", "SH degree"]
    by_step = {int(row[0]): row[1:] for row in rows}
    assert by_step[1] == ["0.00016", "0.0005", "0.002", "0.95", "0"]  # warm-up starts at 0.1 x 5e-3
    assert by_step[121][1] == "0.0005" and by_step[200][4] == "3"  # after the drop; SH degree capped
    with Image.open(out) as image:
        assert image.format == "PNG" and image.height > 500  # 5 panels: means, scales, opacities, beta1, SH
