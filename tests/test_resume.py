"""Resuming from a checkpoint continues the run exactly."""

from __future__ import annotations

import torch

from conftest import tiny_config_text
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer

# Densification every 10 steps and an opacity reset at step 30 and 60 happen in both halves.
OVERRIDES = [
    "strategy.refine_start_iter=10", "strategy.refine_every=10", "strategy.reset_every=30",
    "default_hooks.checkpoint.interval=40", "trainer.val_interval=40",
]


def test_resume_is_bit_identical_to_straight_run(tmp_path):
    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=80))

    def trainer(run: str) -> DefaultTrainer:
        cfg = load_config(tmp_path / "cfg.yaml", OVERRIDES + [f"output_dir={tmp_path / run}"])
        return DefaultTrainer(cfg, console=Console(quiet=True))

    straight = trainer("straight")
    straight.train()
    resumed = trainer("resumed")
    resumed.train(resume=tmp_path / "straight" / "ckpt" / "step_000040.pt")

    assert resumed.step == 80
    assert straight.model.num_gaussians != 300  # densification happened
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert resumed.last_metrics["psnr"] == straight.last_metrics["psnr"]
