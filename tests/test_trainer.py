"""End-to-end training on a tiny version of the demo scene, and the hook points it fires."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import DEMO, tiny_config_text
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import HOOK_POINTS, Hook, HookError
from splattrain.registry import HOOKS


def make_trainer(tmp_path: Path, overrides=(), steps: int = 4, extra: str = "") -> DefaultTrainer:
    path = tmp_path / "cfg.yaml"
    path.write_text(tiny_config_text(tmp_path, steps=steps, extra=extra))
    return DefaultTrainer(load_config(path, list(overrides)), console=Console(quiet=True))


@HOOKS.register()
class RecordingHook(Hook):
    """Records every point it sees (test helper)."""

    def __init__(self, fail_at: str = "") -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.fail_at = fail_at


def _recorder(point: str):
    def method(self, trainer, *args):
        detail = args[0] if args and isinstance(args[0], int) else None
        self.calls.append((point, detail))
        if point == self.fail_at:
            raise ValueError(f"failing in {point}")

    return method


for _point in HOOK_POINTS:
    setattr(RecordingHook, _point, _recorder(_point))


def recorder_of(trainer: DefaultTrainer) -> RecordingHook:
    return next(h for h in trainer.hooks.hooks if isinstance(h, RecordingHook))


def test_every_point_fires_in_documented_order(tmp_path):
    trainer = make_trainer(
        tmp_path, ["trainer.val_interval=2", "data.test_split=test"], steps=4,
        extra="custom_hooks:\n  - type: RecordingHook\n",
    )
    trainer.train()
    calls = recorder_of(trainer).calls
    n_test = len(trainer.data.test_frames)
    step = lambda s: [("before_train_iter", s), ("before_backward", s), ("after_backward", s), ("before_optimizer_step", s), ("after_train_iter", s)]  # noqa: E731
    val = [("before_val", None)]
    for i in range(n_test):
        val += [("before_val_iter", i), ("after_val_iter", i)]
    val += [("after_val", None)]
    expected = [("check", None), ("before_run", None), ("before_train", None)]
    expected += step(1) + step(2) + val + step(3) + step(4)
    expected += val + [("before_save_checkpoint", None), ("after_train", None), ("after_run", None)]
    assert calls == expected


def test_hook_exception_names_hook_runs_on_exception_and_after_run(tmp_path):
    trainer = make_trainer(
        tmp_path, steps=3, extra="custom_hooks:\n  - type: RecordingHook\n    fail_at: after_backward\n"
    )
    with pytest.raises(HookError, match=r"RecordingHook\.after_backward failed: ValueError"):
        trainer.train()
    points = [p for p, _ in recorder_of(trainer).calls]
    assert points[-2:] == ["on_exception", "after_run"]  # no step completed: no rescue checkpoint
    assert points.count("after_backward") == 1


def test_same_seed_same_numbers(tmp_path):
    results = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        trainer = make_trainer(tmp_path / run, steps=6)
        trainer.train()
        results.append(trainer.model.state_dict())
    for key in results[0]:
        assert torch.equal(results[0][key], results[1][key]), key


def mean_colour_baseline_psnr(trainer: DefaultTrainer) -> float:
    """PSNR of predicting every test pixel as the mean training colour."""
    def composite(image: np.ndarray) -> np.ndarray:
        x = image.astype(np.float64) / 255.0
        return x[..., :3] * x[..., 3:] + (1.0 - x[..., 3:])  # white background

    mean = torch.tensor(np.mean([composite(f.image).reshape(-1, 3).mean(0) for f in trainer.data.train_frames], 0))
    mses = [((b["image"].double() - mean) ** 2).mean() for b in trainer.data.test_batches()]
    return float(np.mean([-10 * np.log10(float(m)) for m in mses]))


def test_fit_learns_and_writes_run_directory(tmp_path):
    trainer = make_trainer(
        tmp_path,
        ["trainer.val_interval=150", "strategy.refine_start_iter=50", "strategy.refine_every=50",
         "strategy.reset_every=1000", "model.init.num_points=500"],
        steps=300,
    )
    baseline = mean_colour_baseline_psnr(trainer)
    n_before = trainer.model.num_gaussians
    results = trainer.train()
    run = Path(trainer.cfg.output_dir)

    assert results["psnr"] > baseline + 6.0, (results["psnr"], baseline)
    assert trainer.model.num_gaussians != n_before  # densification ran on CPU
    saved = json.loads((run / "results.json").read_text())
    assert set(saved) >= {"psnr", "ssim", "lpips", "num_gaussians", "steps", "train_seconds"}
    assert saved["steps"] == 300 and saved["lpips"] is None and saved["num_gaussians"] == trainer.model.num_gaussians
    assert saved["psnr"] == pytest.approx(results["psnr"])
    assert (run / "ckpt" / "step_000300.pt").is_file() and (run / "ckpt" / "last.pt").is_file()
    assert (run / "ply" / "step_000300.ply").is_file()
    assert (run / "config.yaml").is_file() and "max_steps: 300" in (run / "config.yaml").read_text()
    assert "validation at step 300" in (run / "log.txt").read_text()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    val_rows = [r for r in rows if "val/psnr" in r]
    assert [r["step"] for r in val_rows] == [150, 300]
    assert val_rows[-1]["val/psnr"] == pytest.approx(results["psnr"])
    image = np.asarray(Image.open(next((run / "images" / "val" / "step_000300").glob("*.png"))))
    assert image.shape == (32, 128, 3)  # render | ground truth | error | depth
    assert list((run / "tb").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("render_depth", [False, True])
def test_training_renders_carry_depth_only_when_asked(tmp_path, render_depth: bool):
    trainer = make_trainer(tmp_path, [f"trainer.render_depth={str(render_depth).lower()}"], steps=1)
    outputs = trainer.train_step(1)
    assert (outputs["render"].depth is not None) == render_depth
    trainer.data.close()
