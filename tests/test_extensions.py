"""User extensions: the shipped example module, and a failing writer."""

from __future__ import annotations

import csv

from conftest import REPO, tiny_config_text
from splattrain import WRITERS, Writer
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer


def test_example_extensions_config_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = load_config(
        REPO / "configs" / "demo_extensions.yaml",
        [f"output_dir={tmp_path / 'run'}", "data.downscale=4", "trainer.max_steps=100", "trainer.val_interval=0",
         "model.init.num_points=300", "model.sh_degree=1", "metrics.lpips=false"],
    )
    trainer = DefaultTrainer(cfg, console=Console(quiet=True), config_dir=REPO / "configs")
    assert [type(h).__name__ for h in trainer.hooks.hooks] == [
        "IterTimerHook", "LogHook", "OpacityStatsHook", "CheckPointHook", "AutoCheckpointHook"]
    trainer.train()
    with open(tmp_path / "run" / "scalars.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    opacity_steps = [int(step) for step, tag, _ in rows if tag == "opacity/mean"]
    assert opacity_steps == [50, 100]
    assert any(tag == "val/psnr" for _, tag, _ in rows)
    assert (tmp_path / "run" / "ckpt" / "step_000100.pt").is_file()


@WRITERS.register()
class ExplodingWriter(Writer):
    """Raises on the second scalar write (test helper)."""

    def __init__(self, run_dir) -> None:
        super().__init__(run_dir)
        self.calls = 0

    def write_scalars(self, scalars, step) -> None:
        self.calls += 1
        if self.calls == 2:
            raise OSError("No space left on device")


def test_failing_writer_is_reported_once_and_disabled(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(tiny_config_text(tmp_path, steps=40, extra="writers:\n  - type: ExplodingWriter\n  - type: jsonl\n"))
    warnings = []
    console = Console(quiet=True)
    console.warning = lambda message, once=None: warnings.append(message)
    trainer = DefaultTrainer(load_config(path, ["default_hooks.logger.interval=10"]), console=console)
    trainer.train()
    failures = [w for w in warnings if "ExplodingWriter" in w]
    assert len(failures) == 1 and "No space left on device" in failures[0] and "disabled" in failures[0]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 5  # steps 10, 20, 30, 40 and the final validation: the jsonl writer kept going
