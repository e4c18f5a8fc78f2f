"""LogHook: EMA loss, Gaussian count, LR and validation metrics to the console and writers."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch

from ..console import ProgressLogger
from ..registry import HOOKS
from .base import Hook, Priority


def side_by_side(render: torch.Tensor, target: torch.Tensor) -> np.ndarray:
    """[H, 2W, 3] uint8 image: render | ground truth."""
    grid = torch.cat([render.clamp(0, 1), target], dim=1)
    return (grid.detach().cpu().numpy() * 255.0 + 0.5).astype(np.uint8)


@HOOKS.register()
class LogHook(Hook):
    """Shows progress (EMA loss, Gaussians, position LR, last PSNR) and logs scalars and images.

    Args:
        interval: write scalars and print a plain progress line every N steps.
        ema: weight of the previous EMA value (EMA = ema * old + (1 - ema) * new).
        num_val_images: how many test views per validation go to the writers as images.
    """

    priority = Priority.BELOW_NORMAL

    def __init__(self, interval: int = 50, ema: float = 0.6, num_val_images: int = 4) -> None:
        super().__init__()
        self.interval = interval
        self.ema = ema
        self.num_val_images = num_val_images
        self.ema_loss: Optional[float] = None
        self._progress: Optional[ProgressLogger] = None

    def before_train(self, trainer) -> None:
        self._progress = ProgressLogger(trainer.console, trainer.max_steps, start=trainer.step, interval=self.interval)
        self._progress.__enter__()

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        loss = outputs["losses"]["loss"].item()
        self.ema_loss = loss if self.ema_loss is None else self.ema * self.ema_loss + (1.0 - self.ema) * loss
        lr = trainer.optimizers["means"].param_groups[0]["lr"]
        fields: Dict[str, Any] = {"loss": self.ema_loss, "gaussians": trainer.model.num_gaussians, "lr": lr}
        if trainer.last_metrics.get("psnr") is not None:
            fields["psnr"] = trainer.last_metrics["psnr"]
        if self._progress is not None:
            self._progress.update(step, fields)
        if self.every_n_steps(trainer, self.interval) or self.is_last_step(trainer):
            scalars = {f"train/{k}": v.item() for k, v in outputs["losses"].items()}
            scalars.update(
                {
                    "train/ema_loss": self.ema_loss,
                    "train/num_gaussians": trainer.model.num_gaussians,
                    "train/lr_means": lr,
                    "train/sh_degree": outputs["sh_degree"],
                }
            )
            trainer.writers.write_scalars(scalars, step)

    def after_val_iter(self, trainer, index: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if index < self.num_val_images:
            image = side_by_side(outputs["render"].rgb[0], batch["image"][0])
            trainer.writers.write_image(f"val/{batch['camera'][0].name}", image, trainer.step)

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        scalars = {f"val/{k}": v for k, v in metrics.items() if k != "step" and v is not None}
        trainer.writers.write_scalars(scalars, trainer.step)
        trainer.writers.flush()
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k != "step" and v is not None)
        trainer.console.print(f"validation at step {trainer.step}: {shown}")

    def after_train(self, trainer) -> None:
        self._close()

    def after_run(self, trainer) -> None:
        self._close()

    def _close(self) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def state_dict(self) -> Dict[str, Any]:
        return {"ema_loss": self.ema_loss} if self.ema_loss is not None else {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.ema_loss = state.get("ema_loss")
