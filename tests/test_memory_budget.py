"""MemoryBudgetHook steering with simulated memory meters, so every number is exact."""

from __future__ import annotations

import math
from typing import List, Tuple

import pytest
import torch

from conftest import tiny_config_text
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook, MemoryBudgetHook
from splattrain.hooks.memory_budget import PIXEL_BYTES
from splattrain.registry import HOOKS

MB = 1024.0 * 1024.0
BASE, PER_GAUSSIAN, PER_PIXEL = 400 * MB, 2048.0, 1024.0


def meter(trainer, per_pixel: float = 0.0, steep_above: float = math.inf) -> float:
    """400 MB + 2 KB per Gaussian (3 KB for those above ``steep_above``) + ``per_pixel`` per pixel."""
    count = trainer.model.num_gaussians
    extra = max(0.0, count - steep_above) * PER_GAUSSIAN / 2
    return BASE + PER_GAUSSIAN * count + extra + per_pixel * trainer.last_pixels


@HOOKS.register()
class SimulatedMemoryBudgetHook(MemoryBudgetHook):
    """Reads a simulated meter (test helper): exact, or with ``per_pixel`` and a steeper cost
    above ``steep_above`` Gaussians, as a peak since the previous sample (``restartable``, as
    on Linux and CUDA) or as the whole run's high-water mark."""

    def __init__(self, per_pixel: float = 0.0, steep_above: float = math.inf, restartable: bool = True,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.meter_args = (per_pixel, steep_above)
        self.restartable = restartable
        self.high_water = 0.0

    def _peak(self, trainer) -> float:
        self.high_water = max(self.high_water, meter(trainer, *self.meter_args))
        return self.high_water

    def _reset_peak(self, trainer) -> bool:
        if self.restartable:
            self.high_water = meter(trainer, *self.meter_args)
        return self.restartable


class Probe(Hook):
    """Tracks the simulated peak and the Gaussian count around every densification."""

    priority = 100

    def __init__(self, meter_args: Tuple[float, float]) -> None:
        super().__init__()
        self.meter_args = meter_args
        self.peak = 0.0
        self.growth: List[Tuple[int, int, int, int]] = []  # (step, before, after, strategy cap)

    def before_train_iter(self, trainer, step, batch):
        trainer.last_pixels = batch["image"][..., 0].numel()
        self.peak = max(self.peak, meter(trainer, *self.meter_args))

    def after_backward(self, trainer, step, outputs):
        self.before = trainer.model.num_gaussians
        self.peak = max(self.peak, meter(trainer, *self.meter_args))

    def after_train_iter(self, trainer, step, batch, outputs):
        self.peak = max(self.peak, meter(trainer, *self.meter_args))
        self.growth.append((step, self.before, trainer.model.num_gaussians, trainer.strategy.growth_cap))


def run(tmp_path, name: str, max_memory_gb: float, steps: int = 50, hook_extra: str = "", extra: str = "",
        checkpoint: str = "null", overrides=()):
    (tmp_path / f"{name}.yaml").write_text(tiny_config_text(tmp_path / name, steps=steps, extra=f"""
strategy: {{refine_start_iter: 5, refine_every: 10, grow_grad2d: 1.0e-7, reset_every: 100000}}
default_hooks: {{checkpoint: {checkpoint}}}
custom_hooks:
  - {{type: SimulatedMemoryBudgetHook, max_memory: {max_memory_gb}, warmup_steps: 30, strategy: greedy{hook_extra}}}
{extra}"""))
    cfg = load_config(tmp_path / f"{name}.yaml", ["model.init.num_points=1000", "trainer.hook_timing=false", *overrides])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    trainer.last_pixels = 0
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, MemoryBudgetHook))
    probe = Probe(hook.meter_args)
    trainer.register_hook(probe)
    trainer.train()
    return trainer, hook, probe


def test_budget_above_warmup_peak_caps_growth(tmp_path):
    free, free_hook, free_probe = run(tmp_path, "free", 100.0)
    warmup_peak = max(s[2] for s in free_hook.samples)
    assert free_probe.peak > warmup_peak + 10 * MB  # densification keeps growing after the warm-up
    budget = warmup_peak + 4 * MB  # just above the warm-up peak; the free run exceeds it
    capped, hook, probe = run(tmp_path, "capped", budget / 1024**3, steps=90)
    assert math.isclose(hook.predicted(0), BASE) and math.isclose(hook.per_gaussian, PER_GAUSSIAN)  # exact fit
    assert abs(hook.cap - (budget - BASE) / PER_GAUSSIAN) <= 1
    assert probe.peak <= budget and hook.pruned == 0  # growth itself is capped, nothing to prune
    assert capped.model.num_gaussians > 0.9 * hook.cap  # greedy: it fills most of the budget


def test_each_densification_takes_a_quarter_of_the_headroom_at_most(tmp_path):
    _, hook, probe = run(tmp_path, "steps", (BASE + 60 * MB) / 1024**3, steps=90)
    grown = [(before, after, cap) for step, before, after, cap in probe.growth if step >= 30 and after > before]
    assert len(grown) >= 3
    for before, after, strategy_cap in grown:
        allowed = before + math.ceil(0.25 * (hook.cap - before))
        assert after <= strategy_cap == allowed


@pytest.mark.parametrize("restartable", [True, False])
def test_a_steeper_cost_than_the_warmup_showed_is_corrected_without_overshoot(tmp_path, restartable):
    """Above 6000 Gaussians each costs 1.5x what the warm-up measured: the first new peak raises
    the cost, the cap comes down, the budget holds, and the count does not collapse (with a
    high-water meter, pruning must not read the old peak as a higher cost again and again)."""
    budget = BASE + 24 * MB
    capped, hook, probe = run(tmp_path, "steep", budget / 1024**3, steps=90,
                              hook_extra=f", steep_above: 6000, restartable: {str(restartable).lower()}")
    assert probe.peak <= budget
    assert hook.per_gaussian > PER_GAUSSIAN and hook.cap < int(24 * MB / PER_GAUSSIAN)
    assert capped.model.num_gaussians >= 0.8 * hook.cap


def test_pixels_are_fitted_across_a_resolution_schedule_and_the_cap_holds_at_full_size(tmp_path):
    schedule = ["trainer.resolution.schedule=[[0,2],[20,1]]"]
    budget = BASE + 40 * MB
    capped, hook, probe = run(tmp_path, "coarse", budget / 1024**3, steps=60,
                              hook_extra=f", per_pixel: {PER_PIXEL}", overrides=schedule)
    assert hook.pixels == 32 * 32  # the configured training size (1/4 of 128 px)
    assert math.isclose(hook.per_pixel, PER_PIXEL, rel_tol=1e-6) and math.isclose(hook.per_gaussian, PER_GAUSSIAN, rel_tol=1e-6)
    assert abs(hook.cap - (budget - BASE - PER_PIXEL * hook.pixels) / PER_GAUSSIAN) <= 1
    assert probe.peak <= budget


def test_one_size_warmup_uses_the_pixel_floor_for_the_full_size_to_come(tmp_path):
    schedule = ["trainer.resolution.schedule=[[0,2],[40,1]]"]
    _, hook, _ = run(tmp_path, "floor", (BASE + 40 * MB) / 1024**3, steps=35, overrides=schedule)
    assert hook.per_pixel == PIXEL_BYTES and hook.pixels == 32 * 32  # known before any full-size step
    assert all(pixels == 16 * 16 for _, pixels, _ in hook.samples)
    warmup_pixels = 16 * 16
    assert math.isclose(hook.predicted(0, warmup_pixels), BASE, rel_tol=1e-9)
    assert math.isclose(hook.predicted(0) - BASE, PIXEL_BYTES * (32 * 32 - warmup_pixels), rel_tol=1e-6)


def test_conservative_keeps_headroom_and_hard_cap_wins(tmp_path):
    hook = SimulatedMemoryBudgetHook(max_memory=440 / 1024, strategy="conservative", max_gaussians=5000)
    hook.samples = [(1000, 0, BASE + PER_GAUSSIAN * 1000), (4000, 0, BASE + PER_GAUSSIAN * 4000)]

    class FakeTrainer:
        console = Console(quiet=True)

        class model:
            params = {"means": torch.zeros(1, 3)}

    hook.fit(FakeTrainer())
    assert math.isclose(hook.per_gaussian, 1.5 * PER_GAUSSIAN)
    assert hook.cap == 5000
    hook.max_gaussians = None
    hook.cap = None
    hook._update_cap(FakeTrainer())
    assert abs(hook.cap - 0.85 * 40 * MB / (1.5 * PER_GAUSSIAN)) <= 1


def test_resume_restores_the_model_and_limits_growth_again(tmp_path):
    budget = (BASE + 30 * MB) / 1024**3
    straight, hook, _ = run(tmp_path, "straight", budget, steps=70,
                            checkpoint="{interval: 50}")
    cfg = load_config(tmp_path / "straight.yaml", ["model.init.num_points=1000", "trainer.hook_timing=false"])
    resumed = DefaultTrainer(cfg, console=Console(quiet=True))
    resumed.last_pixels = 0
    resumed.register_hook(Probe((0.0, math.inf)))
    resumed.train(resume=tmp_path / "straight" / "run" / "ckpt" / "step_000050.pt")
    again = next(h for h in resumed.hooks.hooks if isinstance(h, MemoryBudgetHook))
    assert (again.cap, again.base, again.per_gaussian) == (hook.cap, hook.base, hook.per_gaussian)
    assert resumed.model.num_gaussians == straight.model.num_gaussians <= hook.cap
    assert 0 < resumed.strategy.growth_cap <= hook.cap  # the fresh strategy is capped too


def test_a_strategy_without_a_cap_is_refused(tmp_path):
    from dataclasses import dataclass

    from splattrain.errors import ConfigError
    from splattrain.registry import STRATEGIES
    from splattrain.strategy import Strategy

    @STRATEGIES.register("no_cap_for_test", force=True)
    @dataclass
    class NoCap(Strategy):
        """Never densifies."""

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=2, extra="strategy:\n  type: no_cap_for_test\nwriters: []\n"
                                    "custom_hooks:\n  - {type: MemoryBudgetHook, max_memory: 4.0}\n"))
    trainer = DefaultTrainer(load_config(cfg), console=Console(quiet=True))
    with pytest.raises(ConfigError, match="strategy NoCap cannot cap the number of Gaussians"):
        trainer.train()


def test_every_rank_decides_from_the_largest_peak_of_all_ranks(tmp_path, monkeypatch):
    """On several ranks the hook fits its model to the ranks' largest figures (one MAX all-reduce),
    so every replica caps and prunes alike; here another rank peaks 7 MB higher at every sample."""
    from splattrain.distributed.context import DistContext

    monkeypatch.setattr(DistContext, "max_over_ranks", lambda self, values: [values[0], values[1] + 7 * MB])
    _, hook, _ = run(tmp_path, "ranks", 100.0)
    assert math.isclose(hook.predicted(0), BASE + 7 * MB) and math.isclose(hook.per_gaussian, PER_GAUSSIAN)
