"""Views per step: splitting a step's batch into rendered micro-batches and averaging their losses."""

from __future__ import annotations

from typing import Any, Dict, List

import torch
from torch import Tensor

from ..cameras import Camera
from ..errors import ConfigError

#: Batch entries with one row per view; the others (background) are shared by all views.
_PER_VIEW = ("image", "alpha", "mask", "depth", "image_id")


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
