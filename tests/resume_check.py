"""Straight and resumed runs of the tiny demo config, for the resume tests of stateful hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence, Tuple

import pytest
import torch

from conftest import tiny_config_text
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer
from splattrain.hooks import Hook

#: 16x16 images, the PyTorch renderer (deterministic), densification every 4 steps, a reset at step 8.
OVERRIDES = [
    "data.downscale=8", "renderer.type=torch", "writers=[]", "strategy.refine_start_iter=3", "strategy.refine_every=4",
    "strategy.reset_every=8", "strategy.grow_grad2d=0.001", "default_hooks.checkpoint.interval=6",
]


@pytest.fixture(autouse=True)
def single_thread():
    """One thread: as fast on these tiny scenes, and immune to OpenMP stalls on a busy machine
    (import it into a test module to use it there)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_trainer(
    tmp_path: Path,
    run: str,
    steps: int = 12,
    extra: str = "",
    overrides: Sequence[str] = (),
    hooks: Sequence[Hook] = (),
) -> DefaultTrainer:
    """A trainer on the tiny demo config writing to ``tmp_path / run``, with ``hooks`` added."""
    config = tmp_path / "cfg.yaml"
    config.write_text(tiny_config_text(tmp_path, steps=steps, extra=extra))
    cfg = load_config(config, OVERRIDES + list(overrides) + [f"output_dir={tmp_path / run}"])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    for hook in hooks:
        trainer.register_hook(hook)
    return trainer


def straight_and_resumed(
    tmp_path: Path, extra: str = "", overrides: Sequence[str] = (), hooks: Callable[[], Sequence[Hook]] = tuple
) -> Tuple[DefaultTrainer, DefaultTrainer]:
    """12 steps in one go, and 12 steps resumed from the step-6 checkpoint of the first run
    (each with fresh ``hooks()`` added)."""
    straight = make_trainer(tmp_path, "straight", extra=extra, overrides=overrides, hooks=hooks())
    straight.train()
    resumed = make_trainer(tmp_path, "resumed", extra=extra, overrides=overrides, hooks=hooks())
    resumed.train(resume=tmp_path / "straight" / "ckpt" / "step_000006.pt")
    return straight, resumed


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Nested dicts / lists of tensors and numbers are exactly equal."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def assert_same_run(straight: DefaultTrainer, resumed: DefaultTrainer, hooks: Sequence[str] = ()) -> None:
    """Same Gaussians, optimizer states, final metrics, and states of the ``hooks`` named."""
    assert resumed.step == straight.step
    assert_same(straight.model.state_dict(), resumed.model.state_dict(), "gaussians")
    for name in straight.optimizers:
        assert_same(straight.optimizers[name].state_dict(), resumed.optimizers[name].state_dict(), f"optimizer {name}")
    states = {h.name: h.state_dict() for h in resumed.hooks.hooks}
    for hook in straight.hooks.hooks:
        if hook.name in hooks:
            assert hook.state_dict(), hook.name
            assert_same(hook.state_dict(), states[hook.name], hook.name)
    assert resumed.last_metrics["psnr"] == straight.last_metrics["psnr"]


class CountAfterStep(Hook):
    """Records the Gaussian count after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: list = []

    def after_train_iter(self, trainer, step, batch, outputs):
        self.counts.append(trainer.model.num_gaussians)
