"""Coarse-to-fine training through ``trainer.resolution``: the schedule the steps follow, its
scaling with the run, the frequency-guided ``auto`` schedule, and what is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from splattrain.cameras import Camera
from splattrain.console import Console
from splattrain.data.types import Frame
from splattrain.engine import DefaultTrainer, load_config, load_run_config
from splattrain.engine.resolution import ResolutionSchedule, auto_schedule, build_schedule
from splattrain.errors import ConfigError
from splattrain.hooks import Hook

import cli_runner
from conftest import tiny_config_text

REPO = Path(__file__).resolve().parents[1]


def trainer_for(tmp_path: Path, extra: str = "", overrides=(), steps: int = 12) -> DefaultTrainer:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=steps, extra=extra))
    return DefaultTrainer(load_config(tmp_path / "cfg.yaml", list(overrides)), console=Console(quiet=True))


class SizeProbe(Hook):
    """Records the training render's size per step and the validation renders' sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.train, self.val = {}, []

    def after_train_iter(self, trainer, step, batch, outputs):
        self.train[step] = tuple(outputs["render"].rgb.shape[1:3])
        assert batch["image"].shape[1:3] == outputs["render"].rgb.shape[1:3]

    def after_val_iter(self, trainer, index, batch, outputs):
        self.val.append(tuple(outputs["render"].rgb.shape[1:3]))


def test_the_steps_follow_the_schedule_and_validation_keeps_full_size(tmp_path):
    trainer = trainer_for(tmp_path, overrides=["trainer.val_interval=6", "trainer.resolution.schedule=[[0,4],[5,2],[10,1]]"])
    probe = SizeProbe()
    trainer.register_hook(probe)
    trainer.train()
    assert [probe.train[s] for s in range(1, 13)] == [(8, 8)] * 4 + [(16, 16)] * 5 + [(32, 32)] * 3
    assert set(probe.val) == {(32, 32)}
    assert trainer.data.train_frames[0].camera.K[0, 0] == trainer.data.test_frames[0].camera.K[0, 0]


class StopAt(Hook):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def after_train_iter(self, trainer, step, batch, outputs):
        if step == self.step:
            trainer.request_stop("test")


def test_a_resumed_run_trains_at_the_size_of_its_step(tmp_path):
    """Stopped at step 6 and resumed, the run goes on at the factor of step 7 and ends identical."""
    schedule = ["trainer.resolution.schedule=[[0,4],[5,2],[10,1]]", "default_hooks.checkpoint.interval=6"]
    whole = trainer_for(tmp_path / "whole", overrides=schedule)
    whole.train()
    first = trainer_for(tmp_path / "parts", overrides=schedule)
    first.register_hook(StopAt(6))
    first.train()
    resumed = trainer_for(tmp_path / "parts", overrides=schedule)
    probe = SizeProbe()
    resumed.register_hook(probe)
    resumed.train(resume="latest")
    assert [probe.train[s] for s in range(7, 13)] == [(16, 16)] * 3 + [(32, 32)] * 3
    for name, value in whole.model.params.items():
        assert torch.equal(value, resumed.model.params[name]), name


def test_the_schedule_follows_the_run_length_but_not_the_command_line(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(tiny_config_text(tmp_path, steps=2000).replace(
        "trainer:\n", "trainer:\n  schedule_steps: 2000\n  resolution:\n    schedule: [[0, 4], [500, 2], [1000, 1]]\n"
                      "    until: 800\n"))
    run = load_run_config(config, ["trainer.max_steps=500"])
    assert run.cfg.trainer.resolution.schedule == [[0, 4], [125, 2], [250, 1]]
    assert run.cfg.trainer.resolution.until == 200
    assert any(line.startswith("trainer.resolution.schedule [[0, 4], [125, 2], [250, 1]]") for line in run.scaled)
    given = load_run_config(config, ["trainer.max_steps=500", "trainer.resolution.schedule=[[0,2],[300,1]]"])
    assert given.cfg.trainer.resolution.schedule == [[0, 2], [300, 1]]


def frames_of(images) -> list:
    camera = Camera(viewmat=torch.eye(4), K=torch.eye(3), width=images[0].shape[1], height=images[0].shape[0], name="v")
    return [Frame(image=image, camera=camera, name=f"v{i}") for i, image in enumerate(images)]


def test_auto_starts_coarse_on_smooth_images_and_fine_on_noise():
    """The start is the coarsest factor at which every image keeps a quarter of its spectrum's
    magnitude: smooth gradients keep it at any factor, white noise (a flat spectrum) only up to
    about 2 (a quarter of the frequencies)."""
    y, x = np.mgrid[0:96, 0:128]
    smooth = [np.repeat((127 + 100 * np.sin(x / 40 + k) * np.cos(y / 30)).astype(np.uint8)[..., None], 3, axis=2)
              for k in range(4)]
    schedule = auto_schedule(frames_of(smooth), (0, 0, 0), until=1000, max_factor=4.0)
    assert schedule is not None and schedule.levels[0] == (0, 4.0) and schedule.levels[-1] == (1000, 1.0)
    starts = [s for s, _ in schedule.levels]
    factors = [f for _, f in schedule.levels]
    assert starts == sorted(starts) and factors == sorted(factors, reverse=True)
    assert schedule.factor_at(999) > 1 and schedule.factor_at(1000) == 1

    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(4)]
    noisy = auto_schedule(frames_of(noise), (0, 0, 0), until=1000, max_factor=4.0)
    assert noisy is not None and 1.9 < noisy.levels[0][1] < 2.2
    # white noise keeps magnitude in proportion to the pixels: the levels come about evenly
    assert noisy.levels[1][0] > 200


def test_auto_on_the_demo_and_its_header_line(tmp_path):
    trainer = trainer_for(tmp_path, overrides=["data.downscale=1", "trainer.resolution.schedule=auto",
                                               "trainer.max_steps=40"], steps=40)
    schedule = trainer.resolution
    assert isinstance(schedule, ResolutionSchedule)
    assert schedule.levels[0][0] == 0 and 1 < schedule.levels[0][1] <= 4 and schedule.levels[-1] == (20, 1.0)
    done = cli_runner.run(["fit", "--config", str(tmp_path / "cfg.yaml"), "data.downscale=1",
                           "trainer.resolution.schedule=auto", "trainer.max_steps=40", "writers=[]"], REPO)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "run" / "log.txt").read_text()
    assert f"coarse-to-fine (trainer.resolution): training views at {schedule.describe()}" in log
    assert f"step 1: training at 1/{schedule.levels[0][1]:g} resolution" in log
    assert "step 20: training at full resolution (128x128)" in log


@pytest.mark.parametrize("value, message", [
    ("fast", "must be null, auto or [[start_step, factor], ...]"),
    ("[[0,0.5]]", "needs [[start_step >= 0, factor >= 1], ...]"),
    ("[[-5,2]]", "needs [[start_step >= 0, factor >= 1], ...]"),
    ("[[1.5,2]]", "needs [[start_step >= 0, factor >= 1], ...]"),
    ("[2,4]", "must be null, auto or [[start_step, factor], ...]"),
])
def test_bad_schedules_are_one_line(tmp_path, value, message):
    config = tmp_path / "cfg.yaml"
    config.write_text(tiny_config_text(tmp_path))
    done = cli_runner.run(["fit", "--config", str(config), "--dry-run", f"trainer.resolution.schedule={value}"], REPO)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_config_naming_the_removed_hook_is_told_what_replaced_it(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(tiny_config_text(tmp_path, extra="custom_hooks:\n  - {type: ResolutionScheduleHook, "
                                                      "schedule: [[0, 2], [5, 1]]}\n"))
    done = cli_runner.run(["fit", "--config", str(config), "--dry-run"], REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "custom_hooks[0]" in lines[0] and "ResolutionScheduleHook was removed" in lines[0]
    assert "use trainer.resolution.schedule" in lines[0]
    assert not (tmp_path / "run").exists()


def test_null_is_full_resolution_and_max_factor_is_checked():
    cfg = load_config(REPO / "configs" / "demo.yaml", ["trainer.resolution.schedule=null"])
    assert build_schedule(cfg.trainer.resolution, 2000, [], (1, 1, 1)) is None
    cfg.trainer.resolution.schedule = "auto"
    cfg.trainer.resolution.max_factor = 0.5
    with pytest.raises(ConfigError, match="max_factor' must be a finite number >= 1"):
        build_schedule(cfg.trainer.resolution, 2000, [], (1, 1, 1))
