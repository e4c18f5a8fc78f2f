"""Where a training step's time goes on the demo scene, and the trainer + hook overhead share.

Trains ``configs/demo.yaml`` for ``--steps`` steps (default 300; validation only at the end,
outside the step times) with the default renderer, timing the parts of every training step:
data, render (forward), loss, backward, densification strategy, optimizer + schedulers, hooks,
and the rest of the trainer's step. Overhead = hooks + data + rest of the step; target < 5%.

    python benchmarks/bench_overhead.py [--steps 300] [dotted.key=value ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, DefaultDict

import torch

import splattrain.engine.trainer as trainer_module
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine.trainer import DefaultTrainer

REPO = Path(__file__).resolve().parents[1]
OVERHEAD = ("hooks", "data", "rest of step")


class StepClock:
    """Adds up wall time per part, counting only time inside DefaultTrainer.train_step."""

    def __init__(self) -> None:
        self.seconds: DefaultDict[str, float] = defaultdict(float)
        self.in_step = False

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.in_step:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start

        return timed

    def wrap_step(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            self.in_step = True
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds["step"] += time.perf_counter() - start
                self.in_step = False

        return step


class TimedLoss:
    """The trainer's loss with its calls timed (the other attributes pass through)."""

    def __init__(self, loss: Any, timed_call: Callable[..., Any]) -> None:
        self._loss, self._call = loss, timed_call

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loss, name)


def instrument(trainer: DefaultTrainer, clock: StepClock) -> None:
    """Time the parts of the trainer's step (patches this process's trainer, loss and backward)."""
    trainer.train_step = clock.wrap_step(trainer.train_step)
    trainer.call_hook = clock.wrap("hooks", trainer.call_hook)
    trainer.data.next_train = clock.wrap("data", trainer.data.next_train)
    trainer.renderer.render = clock.wrap("render", trainer.renderer.render)
    trainer.loss = TimedLoss(trainer.loss, clock.wrap("loss", trainer.loss.__call__))
    torch.Tensor.backward = clock.wrap("backward", torch.Tensor.backward)
    for name in ("step_pre_backward", "post_backward"):
        setattr(trainer.strategy, name, clock.wrap("strategy", getattr(trainer.strategy, name)))
    trainer_module.step_optimizers = clock.wrap("optimizer", trainer_module.step_optimizers)
    for scheduler in trainer.schedulers:
        scheduler.step = clock.wrap("optimizer", scheduler.step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("overrides", nargs="*", help="dotted.key=value config overrides")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(REPO / "configs" / "demo.yaml", [
            f"trainer.max_steps={args.steps}", "trainer.val_interval=0", "metrics.lpips=false",
            f"output_dir={tmp}", *args.overrides,
        ])
        trainer = DefaultTrainer(cfg, console=Console(quiet=True))
        clock = StepClock()
        instrument(trainer, clock)
        trainer.train()
    seconds = dict(clock.seconds)
    total = seconds.pop("step")
    seconds["rest of step"] = total - sum(seconds.values())
    print(f"{args.steps} steps on the demo scene, renderer {type(trainer.renderer).__name__}, "
          f"{torch.get_num_threads()} threads, {trainer.model.num_gaussians} Gaussians at the end")
    print(f"{'part':>14} {'ms/step':>9} {'share':>7}")
    for part in ("render", "loss", "backward", "strategy", "optimizer", *OVERHEAD):
        print(f"{part:>14} {seconds.get(part, 0.0) * 1000 / args.steps:9.2f} {seconds.get(part, 0.0) / total:7.1%}")
    print(f"{'step':>14} {total * 1000 / args.steps:9.2f} {1:7.1%}")
    overhead = sum(seconds.get(part, 0.0) for part in OVERHEAD)
    print(f"trainer + hook overhead (hooks, data, rest of step): {overhead / total:.1%} of step time (target < 5%)")


if __name__ == "__main__":
    main()
