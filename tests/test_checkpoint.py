"""Checkpoint files, CheckPointHook options, and resuming from damaged or changed runs."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_config_text
from splattrain.checkpoints.files import (
    config_changes,
    find_resume_checkpoint,
    load_checkpoint_file,
    save_checkpoint_file,
    step_checkpoints,
)
from splattrain.engine import load_config
from splattrain.errors import CheckpointError
from splattrain.console import Console
from splattrain.engine import DefaultTrainer


def trainer_for(tmp_path, overrides=(), steps=20, extra=""):
    path = tmp_path / "cfg.yaml"
    if not path.exists():
        path.write_text(tiny_config_text(tmp_path, steps=steps, extra=extra))
    return DefaultTrainer(load_config(path, list(overrides)), console=Console(quiet=True))


class Recorder:
    def __init__(self):
        self.messages = []

    def __call__(self, message, once=None):
        self.messages.append(message)


def test_checksum_detects_truncation_and_bit_flips(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint_file({"step": 3, "x": torch.arange(10_000.0)}, path)
    assert load_checkpoint_file(path)["step"] == 3
    raw = bytearray(path.read_bytes())
    (tmp_path / "short.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match=r"short\.pt' is truncated or corrupted"):
        load_checkpoint_file(tmp_path / "short.pt")
    raw[len(raw) // 2] ^= 0xFF  # inside the tensor bytes: torch.load alone would not notice
    (tmp_path / "flip.pt").write_bytes(raw)
    with pytest.raises(CheckpointError, match=r"flip\.pt' is (corrupted|truncated)"):
        load_checkpoint_file(tmp_path / "flip.pt")
    torch.save({"step": 1}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="not a splattrain checkpoint"):
        load_checkpoint_file(tmp_path / "plain.pt")


def test_checkpoints_of_the_bytes_payload_format_still_load(tmp_path):
    """Earlier checkpoints held their payload as bytes; the current ones as a uint8 tensor."""
    import hashlib
    import io

    buffer = io.BytesIO()
    torch.save({"step": 7, "x": torch.rand(100_000, generator=torch.Generator().manual_seed(0))}, buffer)
    payload = buffer.getvalue()
    torch.save({"format": "splattrain-checkpoint/1", "sha256": hashlib.sha256(payload).hexdigest(),
                "payload": payload}, tmp_path / "old.pt")
    old = load_checkpoint_file(tmp_path / "old.pt")
    assert old["step"] == 7 and old["x"].shape == (100_000,)
    save_checkpoint_file(old, tmp_path / "new.pt")
    wrapper = torch.load(tmp_path / "new.pt", weights_only=True)
    assert wrapper["payload"].dtype == torch.uint8 and wrapper["payload"].numel() == len(payload)
    assert torch.equal(load_checkpoint_file(tmp_path / "new.pt")["x"], old["x"])
    assert (tmp_path / "new.pt").stat().st_size < 1.1 * len(payload) < (tmp_path / "old.pt").stat().st_size  # protocol 2 bytes grow


def test_resume_latest_falls_back_to_newest_intact(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (10, 20):
        save_checkpoint_file({"step": step}, ckpt / f"step_{step:06d}.pt")
    (ckpt / "last.pt").write_bytes(b"garbage")
    raw = (ckpt / "step_000020.pt").read_bytes()
    (ckpt / "step_000020.pt").write_bytes(raw[:-100])
    warn = Recorder()
    path, checkpoint = find_resume_checkpoint(ckpt, warn)
    assert path.name == "step_000010.pt" and checkpoint["step"] == 10
    assert len(warn.messages) == 2 and "last.pt" in warn.messages[0] and "step_000020.pt" in warn.messages[1]


def test_config_changes_split_incompatible_and_compatible():
    saved = {"data": {"path": "data/demo", "downscale": 1.0}, "model": {"sh_degree": 3}, "trainer": {"max_steps": 10}}
    current = {"data": {"path": "data/demo", "downscale": 2.0}, "model": {"sh_degree": 2}, "trainer": {"max_steps": 20}}
    incompatible, compatible = config_changes(saved, current)
    assert incompatible == ["data.downscale: 1.0 -> 2.0", "model.sh_degree: 3 -> 2"]
    assert compatible == ["trainer.max_steps: 10 -> 20"]


def test_resume_refuses_incompatible_config_and_reports_compatible(tmp_path):
    first = trainer_for(tmp_path, ["default_hooks.checkpoint.interval=10"])
    first.train()
    changed = trainer_for(tmp_path, ["model.sh_degree=2"])
    with pytest.raises(CheckpointError, match=r"model\.sh_degree: 1 -> 2"):
        changed.train(resume="latest")
    longer = trainer_for(tmp_path, ["trainer.max_steps=30"])
    infos = []
    longer.console.info = lambda message, **options: infos.append(message)
    longer.train(resume="latest")
    assert longer.step == 30
    assert any("trainer.max_steps: 20 -> 30" in m for m in infos)


def test_hook_options_max_keep_best_ply_interval_publish(tmp_path):
    trainer = trainer_for(
        tmp_path,
        ["default_hooks.checkpoint.interval=5", "default_hooks.checkpoint.max_keep=2",
         "default_hooks.checkpoint.save_begin=10", "default_hooks.checkpoint.save_best=auto",
         "default_hooks.checkpoint.ply_interval=4", "default_hooks.checkpoint.publish=true",
         "trainer.val_interval=5"],
        steps=20,
    )
    trainer.train()
    run = trainer.run_dir
    assert [p.name for p in step_checkpoints(run / "ckpt")] == ["step_000020.pt", "step_000015.pt"]
    assert sorted(p.name for p in (run / "ply").iterdir()) == [
        "step_000004.ply", "step_000008.ply", "step_000012.ply", "step_000016.ply", "step_000020.ply"]
    best = load_checkpoint_file(run / "ckpt" / "best.pt")
    hook = next(h for h in trainer.hooks.hooks if type(h).__name__ == "CheckPointHook")
    assert best["step"] == hook.best_step and best["last_metrics"]["psnr"] == pytest.approx(hook.best_value)
    assert hook.best_value == pytest.approx(max(hook.best_value, trainer.last_metrics["psnr"]))
    published = load_checkpoint_file(run / "ckpt" / "published.pt")
    assert "optimizers" not in published and published["step"] == 20
    assert (run / "scene.ply").is_file()
    assert load_checkpoint_file(run / "ckpt" / "last.pt")["step"] == 20
