"""Weights & Biases, offline by default (``pip install 'splattrain[wandb]'``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ..registry import WRITERS
from .base import Writer


@WRITERS.register("wandb", aliases=("WandbWriter",))
class WandbWriter(Writer):
    """Weights & Biases run (offline by default: files under <run_dir>/wandb, sync later).

    Args:
        project: W&B project.
        name: run name (default: the run directory's name).
        mode: ``offline`` (default; ``wandb sync`` uploads later), ``online`` or ``disabled``.
        entity: W&B team or user (default: yours).
        tags: run tags.
    """

    requires = ("wandb", "wandb")

    def __init__(
        self,
        run_dir: str | Path,
        project: str = "splattrain",
        name: Optional[str] = None,
        mode: str = "offline",
        entity: Optional[str] = None,
        tags: Optional[List[str]] = None,
    ) -> None:
        super().__init__(run_dir)
        self._wandb = self.load_requirement()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._run = self._wandb.init(
            project=project,
            name=name or self.run_dir.name,
            entity=entity,
            tags=list(tags or []),
            mode=mode,
            dir=str(self.run_dir),
            reinit="create_new",
            settings=self._wandb.Settings(silent=True, console="off"),
        )

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._run.log({tag: float(value) for tag, value in scalars.items()}, step=step)

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        self.write_scalars({tag: value}, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        self._run.log({tag: self._wandb.Image(image)}, step=step)

    def write_histogram(self, tag: str, values: np.ndarray, step: int) -> None:
        self._run.log({tag: self._wandb.Histogram(values)}, step=step)

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        self._run.config.update(config, allow_val_change=True)

    def close(self) -> None:
        self._run.finish()
