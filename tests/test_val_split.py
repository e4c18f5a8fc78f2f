"""data.val_split: training views held out as a validation set (never trained on, never a test
view), their PSNR beside the training views' in the console and results.json, the hooks that
follow them (EarlyStoppingHook and save_best with ``split: val``) and resume keeping the split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest
import torch

from cli_check import assert_one_line_error, run_cli, write_config
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.console import Console
from splattrain.data.split import validation_picks
from splattrain.engine import DefaultTrainer, load_config
from splattrain.hooks import Hook
from splattrain.metrics import mean_metrics
from splattrain.registry import HOOKS


@HOOKS.register(force=True)
class BatchRecorderHook(Hook):
    """Records the name and image id of every view of every training batch (test helper)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: List[tuple] = []

    def before_train_iter(self, trainer, step, batch):
        self.seen += [(camera.name, int(i)) for camera, i in zip(batch["camera"], batch["image_id"])]


SCRIPTED_MODULE = '''
from splattrain import HOOKS, Hook


@HOOKS.register(force=True)
class ScriptedScoresHook(Hook):
    """Overwrites each validation's test and validation PSNR with scripted values before the other
    hooks see them: the test views keep improving while the held-out views get worse."""

    priority = 0

    def __init__(self, test, val):
        super().__init__()
        self.test, self.val, self.count = list(test), list(val), 0

    def after_val(self, trainer, metrics):
        index = min(self.count, len(self.test) - 1)
        metrics["psnr"], metrics["val_psnr"] = self.test[index], self.val[index]
        self.count += 1
'''


def _results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def _trainer(tmp_path: Path, steps: int, extra: str = "", overrides: tuple = ()) -> DefaultTrainer:
    config = write_config(tmp_path, tmp_path / "run", steps=steps, extra=extra)
    return DefaultTrainer(load_config(config, list(overrides)), console=Console(quiet=True))


def test_held_out_views_never_reach_a_training_batch(tmp_path):
    trainer = _trainer(tmp_path, 45, "custom_hooks: [{type: BatchRecorderHook}]\n", ("data.val_split=8",))
    val = [frame.name for frame in trainer.data.val_frames]
    train = [frame.name for frame in trainer.data.train_frames]
    assert val == [f"r_{i}" for i in range(7, 48, 8)]  # every 8th of the 48 training photos
    assert len(train) == 42 and not set(val) & set(train)
    test_poses = [frame.camera.viewmat for frame in trainer.data.test_frames]  # never a test view
    assert not any(torch.equal(frame.camera.viewmat, pose) for frame in trainer.data.val_frames for pose in test_poses)
    trainer.train()
    recorder = next(h for h in trainer.hooks.hooks if isinstance(h, BatchRecorderHook))
    names = [name for name, _ in recorder.seen]
    assert len(names) == 45 and set(names) == set(train)  # a whole epoch of the training views, and more
    assert not set(names) & set(val)
    assert all(train[i] == name for name, i in recorder.seen)  # image ids index the training views only
    assert max(i for _, i in recorder.seen) == 41


def test_results_report_train_and_validation_psnr_beside_the_test_scores(tmp_path):
    trainer = _trainer(tmp_path, 6, overrides=("data.val_split=0.125",))
    fit = trainer.train()
    results = _results(tmp_path / "run")
    assert results["val_views"] == 6 and len(trainer.data.val_frames) == 6
    # the held-out views' PSNR, scored here again from the trained scene, is the reported one
    scores = []
    for batch in trainer.data.val_batches():
        render = trainer.renderer.render(trainer.model, batch["camera"], trainer.schedule.sh_degree_at(6),
                                         trainer.background)
        scores.append(trainer.evaluator(render.rgb, batch["image"]))
    assert results["val_psnr"] == pytest.approx(mean_metrics(scores)["psnr"], abs=1e-6)
    assert results["val_ssim"] == pytest.approx(mean_metrics(scores)["ssim"], abs=1e-6)
    assert results["psnr"] == pytest.approx(mean_metrics(results["per_view"])["psnr"], abs=1e-9)
    assert {v["view"] for v in results["per_view"]} == {f.name for f in trainer.data.test_frames}
    assert results["val_psnr"] != results["psnr"]
    assert isinstance(results["train_psnr"], float) and results["train_psnr"] != results["val_psnr"]
    assert fit["train_psnr"] == results["train_psnr"]


def test_without_a_split_validation_is_the_test_views_and_the_line_says_so(tmp_path):
    run = tmp_path / "run"
    config = write_config(tmp_path, run, steps=4)
    fit = run_cli("fit", "--config", str(config), "trainer.val_interval=2")
    assert fit.returncode == 0, fit.stderr
    results = _results(run)
    assert results["val_views"] == 0
    assert results["val_psnr"] == results["psnr"] and results["val_ssim"] == results["ssim"]
    assert isinstance(results["train_psnr"], float)
    lines = [line for line in fit.stdout.splitlines() if line.startswith("step 4: train psnr")]
    assert lines == [f"step 4: train psnr {results['train_psnr']:.2f}  val psnr {results['psnr']:.2f} "
                     f"(the test views)  gap {results['train_psnr'] - results['psnr']:+.2f} dB"]


def test_the_console_line_names_the_held_out_views(tmp_path):
    run = tmp_path / "run"
    config = write_config(tmp_path, run, steps=2)
    fit = run_cli("fit", "--config", str(config), "data.val_split=12")
    assert fit.returncode == 0, fit.stderr
    results = _results(run)
    assert "44 train / 10 test / 4 validation views" in fit.stdout
    assert (f"step 2: train psnr {results['train_psnr']:.2f}  val psnr {results['val_psnr']:.2f} "
            "(4 held-out training views)") in fit.stdout


@pytest.mark.parametrize("split", ["test", "val"])
def test_early_stopping_and_save_best_follow_the_chosen_split(tmp_path, split):
    (tmp_path / "scripted.py").write_text(SCRIPTED_MODULE)
    extra = f"""
imports: [{tmp_path / 'scripted.py'}]
custom_hooks:
  - {{type: ScriptedScoresHook, test: [20, 21, 22, 23, 24], val: [20, 19, 18, 17, 16]}}
  - {{type: EarlyStoppingHook, split: {split}, patience: 2}}
default_hooks:
  checkpoint: {{interval: 0, save_best: psnr, split: {split}}}
"""
    run = tmp_path / "run"
    config = write_config(tmp_path, run, steps=10, extra=extra)
    fit = run_cli("fit", "--config", str(config), "data.val_split=8", "trainer.val_interval=2")
    assert fit.returncode == 0, fit.stderr
    results = _results(run)
    best = load_checkpoint_file(run / "ckpt" / "best.pt")
    if split == "val":  # the held-out views got worse from the first validation on
        assert results["stopped"]["step"] == 6
        assert results["stopped"]["reason"].startswith("early stopping: val_psnr did not improve")
        assert best["step"] == 2 and best["hooks"]["checkpoint"]["best_value"] == 20
        assert "new best val_psnr 20.0000 at step 2" in fit.stdout
    else:  # the test views kept improving: no stop, the last state is the best
        assert "stopped" not in results and results["steps"] == 10
        assert best["step"] == 10 and best["hooks"]["checkpoint"]["best_value"] == 24


@pytest.mark.parametrize("hook", ["custom_hooks: [{type: EarlyStoppingHook, split: val}]",
                                  "default_hooks: {checkpoint: {save_best: psnr, split: val}}"])
def test_split_val_without_held_out_views_is_refused(tmp_path, hook):
    config = write_config(tmp_path, tmp_path / "run", extra=hook)
    result = run_cli("fit", "--config", str(config), "--dry-run")
    assert_one_line_error(result, "split 'val'", "data.val_split")
    assert not (tmp_path / "run").exists()


def test_an_unknown_split_is_refused(tmp_path):
    config = write_config(tmp_path, tmp_path / "run", extra="custom_hooks: [{type: EarlyStoppingHook, split: train}]")
    assert_one_line_error(run_cli("fit", "--config", str(config), "--dry-run"), "EarlyStoppingHook split 'train'")


@pytest.mark.parametrize("value", ["1", "1.5", "0", "-0.2", "0.999"])
def test_a_val_split_that_leaves_no_training_views_or_is_malformed_is_refused(tmp_path, value):
    config = write_config(tmp_path, tmp_path / "run")
    result = run_cli("fit", "--config", str(config), "--dry-run", f"data.val_split={value}")
    assert_one_line_error(result, "data.val_split")
    assert not (tmp_path / "run").exists()


def test_validation_picks_spread_over_the_views():
    assert validation_picks(10, None) == [False] * 10
    assert [i for i, pick in enumerate(validation_picks(10, 4)) if pick] == [3, 7]
    assert [i for i, pick in enumerate(validation_picks(10, 0.2)) if pick] == [2, 7]
    assert sum(validation_picks(3, 0.01)) == 1  # a fraction holds out at least one view


def test_resume_keeps_the_split(tmp_path):
    overrides = ("data.val_split=6", "trainer.val_interval=4", "default_hooks.checkpoint.interval=4")
    straight = _trainer(tmp_path, 8, overrides=overrides)
    straight.train()
    checkpoint = tmp_path / "run" / "ckpt" / "step_000004.pt"
    resumed = _trainer(tmp_path, 8, overrides=overrides + (f"output_dir={tmp_path / 'resumed'}",))
    resumed.train(resume=checkpoint)
    assert [f.name for f in resumed.data.val_frames] == [f.name for f in straight.data.val_frames]
    assert len(resumed.data.val_frames) == 8
    for key in ("psnr", "train_psnr", "val_psnr", "val_ssim"):
        assert resumed.last_metrics[key] == straight.last_metrics[key], key
    assert _results(tmp_path / "resumed")["val_psnr"] == _results(tmp_path / "run")["val_psnr"]
    # a resume that would train on other views is refused before anything is written
    before = {p.name: p.read_bytes() for p in (tmp_path / "run" / "ckpt").iterdir()}
    changed = run_cli("fit", "--config", str(tmp_path / "cfg.yaml"), *overrides[1:], "data.val_split=12",
                      "trainer.max_steps=12", "--resume")
    assert_one_line_error(changed, "data.val_split: 6.0 -> 12.0")
    assert {p.name: p.read_bytes() for p in (tmp_path / "run" / "ckpt").iterdir()} == before
