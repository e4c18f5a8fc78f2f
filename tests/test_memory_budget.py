"""MemoryBudgetHook steering, with a simulated memory meter so the numbers are exact."""

from __future__ import annotations

import torch

from conftest import tiny_config_text
from splattrain.config import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook, MemoryBudgetHook
from splattrain.registry import HOOKS

MB = 1024.0 * 1024.0
BASE, PER_GAUSSIAN = 400 * MB, 2048.0


@HOOKS.register()
class SimulatedMemoryBudgetHook(MemoryBudgetHook):
    """Reads a simulated meter, peak = 400 MB + 2 KB per Gaussian (test helper)."""

    def _peak(self, trainer) -> float:
        return BASE + PER_GAUSSIAN * trainer.model.num_gaussians


class PeakProbe(Hook):
    priority = 100

    def __init__(self) -> None:
        super().__init__()
        self.peak = 0.0

    def before_train_iter(self, trainer, step, batch):
        self.peak = max(self.peak, BASE + PER_GAUSSIAN * trainer.model.num_gaussians)


def run(tmp_path, name: str, max_memory_gb: float):
    (tmp_path / f"{name}.yaml").write_text(tiny_config_text(tmp_path / name, steps=50, extra=f"""
strategy: {{refine_start_iter: 5, refine_every: 10, grow_grad2d: 1.0e-7, reset_every: 100000}}
default_hooks: {{checkpoint: null}}
custom_hooks:
  - {{type: SimulatedMemoryBudgetHook, max_memory: {max_memory_gb}, warmup_steps: 30, strategy: greedy}}
"""))
    cfg = load_config(tmp_path / f"{name}.yaml", ["model.init.num_points=1000", "trainer.hook_timing=false"])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    probe = PeakProbe()
    trainer.register_hook(probe)
    trainer.train()
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, MemoryBudgetHook))
    return trainer, hook, probe.peak


def test_budget_above_warmup_peak_caps_growth(tmp_path):
    free, free_hook, free_peak = run(tmp_path, "free", 100.0)
    warmup_peak = max(s[2] for s in free_hook.samples)
    assert free_peak > warmup_peak + 10 * MB  # densification keeps growing after the warm-up
    budget = warmup_peak + 4 * MB  # just above the warm-up peak; the free run exceeds it
    capped, hook, capped_peak = run(tmp_path, "capped", budget / 1024**3)
    assert hook.base == BASE and hook.per_gaussian == PER_GAUSSIAN  # the fitted model is exact
    assert hook.cap == int((budget - BASE) / PER_GAUSSIAN)
    assert capped_peak <= budget and capped.model.num_gaussians <= hook.cap
    assert capped.strategy.max_gaussians == hook.cap  # growth itself is capped, not only pruned after


def test_conservative_keeps_headroom_and_hard_cap_wins(tmp_path):
    hook = SimulatedMemoryBudgetHook(max_memory=440 / 1024, strategy="conservative", max_gaussians=5000)
    hook.samples = [(1000, 0, BASE + PER_GAUSSIAN * 1000), (4000, 0, BASE + PER_GAUSSIAN * 4000)]

    class Strategy:
        max_gaussians = 0

    class FakeTrainer:
        strategy = Strategy()
        console = Console(quiet=True)

        class model:
            params = {"means": torch.zeros(1, 3)}

    hook.fit(FakeTrainer())
    assert hook.per_gaussian == 1.5 * PER_GAUSSIAN
    assert hook.cap == 5000 and FakeTrainer.strategy.max_gaussians == 5000
    hook.max_gaussians = None
    hook.cap = None
    hook._update_cap(FakeTrainer())
    assert hook.cap == int(0.85 * 40 * MB / (1.5 * PER_GAUSSIAN))
