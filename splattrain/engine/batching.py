"""Views per step: splitting a step's batch into rendered micro-batches and averaging their losses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

import torch
from torch import Tensor

from ..cameras import Camera
from ..errors import ConfigError

#: Batch entries with one row per view; the others (background) are shared by all views.
_PER_VIEW = ("image", "alpha", "mask", "depth", "image_id")


@dataclass(frozen=True)
class StepSettings:
    """The config values a training step reads, taken from the config once when the trainer is
    built (each OmegaConf lookup costs tens of microseconds; a step made several). A hook that
    changes one of these keys during a run must also replace ``trainer.step_settings``."""

    batch_size: int  # trainer.batch_size
    render_depth: bool  # trainer.render_depth, or a loss term needs depth
    val_interval: int  # trainer.val_interval
    val_begin: int  # trainer.val_begin
    sh_degree: int  # model.sh_degree
    sh_degree_interval: int  # model.sh_degree_interval

    @classmethod
    def from_config(cls, cfg: Any, render_depth: bool = False) -> "StepSettings":
        """The settings of ``cfg``; ``render_depth`` forces depth in training renders (a loss term reads it)."""
        trainer, model = cfg.trainer, cfg.model
        return cls(
            batch_size=int(trainer.batch_size), render_depth=bool(trainer.render_depth) or render_depth,
            val_interval=int(trainer.val_interval), val_begin=int(trainer.val_begin),
            sh_degree=int(model.sh_degree), sh_degree_interval=int(model.sh_degree_interval),
        )


def views_per_step(batch_size: int, accumulate_steps: int, cameras: List[Camera]) -> int:
    """``trainer.batch_size`` x ``optim.accumulate_steps``, checked against the training cameras."""
    if batch_size < 1 or accumulate_steps < 1:
        raise ConfigError("trainer.batch_size and optim.accumulate_steps must be >= 1")
    if batch_size > 1 and len({(c.width, c.height) for c in cameras}) > 1:
        raise ConfigError(
            "trainer.batch_size > 1 needs training images of one size; use optim.accumulate_steps instead"
        )
    return batch_size * accumulate_steps


def micro_batches(batch: Dict[str, Any], size: int) -> List[Dict[str, Any]]:
    """``batch`` cut into consecutive batches of ``size`` views (one batch when it has no more)."""
    count = len(batch["camera"])
    if count <= size:
        return [batch]
    chunks = []
    for start in range(0, count, size):
        chunk = {key: value[start : start + size] if key in _PER_VIEW else value for key, value in batch.items()}
        chunk["camera"] = batch["camera"][start : start + size]
        chunks.append(chunk)
    return chunks


def mean_losses(terms: List[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    """The mean of each loss term over the micro-batches (the terms themselves when there is one)."""
    if len(terms) == 1:
        return terms[0]
    return {key: torch.stack([t[key].detach() for t in terms]).mean() for key in terms[0]}
