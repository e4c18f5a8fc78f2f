"""Hooks steer the run: request_stop / request_validation / request_checkpoint, the built-in
EarlyStoppingHook (also across two ranks), results.json saying why, and resume of a stopped run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_check import REPO, run_cli, write_config
from dist_launch import run_torchrun
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook, StepOutputs
from splattrain.registry import HOOKS

#: Validation every 2 steps; no improvement can beat the first value by 100 dB: the second
#: validation (step 4) is one without improvement, and patience 1 stops the run there.
EARLY = """
custom_hooks:
  - type: EarlyStoppingHook
    patience: 1
    min_delta: 100
"""

STEERING_MODULE = '''
from splattrain import HOOKS, Hook
from splattrain.steps import Steps


@HOOKS.register(force=True)
class SteeringHook(Hook):
    """Requests a validation, a checkpoint and a stop at given steps, on one rank or all."""

    def __init__(self, validate_at: Steps = 0, save_at: Steps = 0, stop_at: Steps = 0, rank: int = -1) -> None:
        super().__init__()
        self.validate_at, self.save_at, self.stop_at, self.rank = validate_at, save_at, stop_at, rank
        self.validated = []

    def after_train_iter(self, trainer, step, batch, outputs):
        if self.rank >= 0 and trainer.rank != self.rank:
            return
        if step == self.validate_at:
            trainer.request_validation()
        if step == self.save_at:
            trainer.request_checkpoint()
        if step == self.stop_at:
            trainer.request_stop(f"asked at step {step}")

    def after_val(self, trainer, metrics):
        self.validated.append(metrics["step"])
'''


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _steering(folder: Path, **options) -> str:
    module = folder / "steering.py"
    module.write_text(STEERING_MODULE)
    args = "".join(f"\n    {key}: {value}" for key, value in options.items())
    return f"imports: [{module}]\ncustom_hooks:\n  - type: SteeringHook{args}\n"


def test_early_stopping_ends_the_run_and_resume_goes_on_counting(tmp_path):
    run = tmp_path / "run"
    config = write_config(tmp_path, run, steps=20, extra=EARLY)
    fit = run_cli("fit", "--config", str(config), "--quiet", "trainer.val_interval=2")
    assert fit.returncode == 0, fit.stderr
    results = _results(run)
    assert results["steps"] == 4
    assert results["stopped"]["step"] == 4
    assert results["stopped"]["reason"].startswith("early stopping: psnr did not improve by more than 100 in 1 validations")
    assert "at step 2)" in results["stopped"]["reason"]
    checkpoint = load_checkpoint_file(run / "ckpt" / "step_000004.pt")
    assert checkpoint["step"] == 4
    state = checkpoint["hooks"]["EarlyStoppingHook"]
    assert (state["best_step"], state["bad_validations"], state["last_step"]) == (2, 1, 4)
    assert (run / "ckpt" / "last.pt").samefile(run / "ckpt" / "step_000004.pt")
    # resume continues (documented): the hook's state is restored, the re-validation of step 4
    # is not counted again, and the next validation without improvement (step 6) stops it
    resumed = run_cli("fit", "--config", str(config), "--quiet", "trainer.val_interval=2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    results = _results(run)
    assert results["steps"] == 6
    assert results["stopped"]["step"] == 6
    assert "in 2 validations (best" in results["stopped"]["reason"]


def test_requests_validate_save_and_stop_after_the_step(tmp_path):
    run = tmp_path / "run"
    extra = _steering(tmp_path, validate_at=3, save_at=5, stop_at=7)
    cfg = load_config(write_config(tmp_path, run, steps=20, extra=extra))
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    results = trainer.train()
    hook = next(h for h in trainer.hooks.hooks if type(h).__name__ == "SteeringHook")
    assert hook.validated == [3, 7]  # requested, then the final validation of the stopped run
    assert sorted(p.name for p in (run / "ckpt").glob("step_*.pt")) == ["step_000005.pt", "step_000007.pt"]
    assert results["stopped"] == {"step": 7, "reason": "asked at step 7"}
    assert _results(run)["stopped"] == {"step": 7, "reason": "asked at step 7"}
    assert trainer.step == 7 and trainer.stop_reason == "asked at step 7"


@HOOKS.register(force=True)
class ZeroGradientsHook(Hook):
    """Clears every gradient right before the optimizer step (test helper)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def after_backward(self, trainer, step, outputs):
        assert isinstance(outputs, StepOutputs) and outputs["losses"] is outputs.losses

    def before_optimizer_step(self, trainer, step, outputs):
        self.seen.append(step)
        for param in trainer.model.params.values():
            param.grad.zero_()


def test_before_optimizer_step_sees_the_gradients_the_optimizer_uses(tmp_path):
    extra = "custom_hooks:\n  - type: ZeroGradientsHook\n"
    cfg = load_config(write_config(tmp_path, tmp_path / "run", steps=3, extra=extra))
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    before = {k: v.detach().clone() for k, v in trainer.model.params.items()}
    trainer.train()
    hook = next(h for h in trainer.hooks.hooks if isinstance(h, ZeroGradientsHook))
    assert hook.seen == [1, 2, 3]
    for key, value in trainer.model.params.items():  # Adam moves nothing on zero gradients
        assert torch.equal(value.detach(), before[key]), key


@pytest.mark.slow
def test_a_stop_asked_on_one_rank_stops_both_at_the_same_step(tmp_path):
    run = tmp_path / "run"
    extra = _steering(tmp_path, stop_at=5, rank=1) + "writers:\n  - type: csv\n"
    config = write_config(tmp_path, run, steps=20, extra=extra.replace("writers: []\n", ""))
    run_torchrun(config, [f"output_dir={run}"])
    results = _results(run)
    assert results["stopped"] == {"step": 5, "reason": "asked at step 5 (rank 1)"}
    assert results["steps"] == 5
    assert load_checkpoint_file(run / "ckpt" / "step_000005.pt")["step"] == 5


@pytest.mark.slow
def test_early_stopping_on_two_ranks_stops_where_one_rank_does(tmp_path):
    run = tmp_path / "two"
    config = write_config(tmp_path, run, steps=20, extra=EARLY)
    run_torchrun(config, [f"output_dir={run}", "trainer.val_interval=2"])
    results = _results(run)
    assert results["stopped"]["step"] == 4 and results["steps"] == 4
    assert results["stopped"]["reason"].startswith("early stopping: psnr")


def test_the_worked_example_stops_at_its_target(tmp_path):
    """examples/my_stop_hook.py (configs/demo_early_stopping.yaml): a target any run reaches stops
    it at the first validation; the worked config passes --dry-run."""
    extra = f"imports: [{REPO / 'examples' / 'my_stop_hook.py'}]\ncustom_hooks:\n  - type: StopAtTargetHook\n    target: 1.0\n"
    run = tmp_path / "run"
    fit = run_cli("fit", "--config", str(write_config(tmp_path, run, steps=20, extra=extra)), "--quiet",
                  "trainer.val_interval=3")
    assert fit.returncode == 0, fit.stderr
    stopped = _results(run)["stopped"]
    assert stopped["step"] == 3 and stopped["reason"].endswith("reached the target 1")
    dry = run_cli("fit", "--config", str(REPO / "configs" / "demo_early_stopping.yaml"), "--dry-run",
                  f"output_dir={tmp_path / 'demo'}")
    assert dry.returncode == 0, dry.stderr


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "-0.5"])
def test_min_delta_must_be_a_finite_number(tmp_path, value):
    from cli_check import assert_one_line_error

    config = write_config(tmp_path, tmp_path / "run", extra=f"custom_hooks: [{{type: EarlyStoppingHook, min_delta: {value}}}]")
    result = run_cli("fit", "--config", str(config), "--dry-run")
    assert_one_line_error(result, str(config), "EarlyStoppingHook min_delta must be a finite number >= 0")
    assert not (tmp_path / "run").exists()
