"""The ranks' replicas of the model must stay identical: a checksum of every parameter (and the
Gaussian count) compared across ranks before training, every ``trainer.replica_check_interval``
steps and before every checkpoint (a single process has nothing to compare)."""

from __future__ import annotations

from typing import Dict, List

import torch

from ..distributed import DistContext
from ..distributed.sync import parameter_checksums
from ..errors import UserError
from ..view_opt import ViewCorrections


class ReplicaDivergenceError(UserError):
    """The ranks' Gaussians differ: something in the step is not the same on every rank."""


def check_replicas(dist: DistContext, params: Dict[str, torch.Tensor], view_opt: ViewCorrections, when: str) -> None:
    """Raise :class:`ReplicaDivergenceError` naming the first parameter (Gaussians or per-view
    corrections) that differs from rank 0's, and the ranks that differ. The checksum sums each
    tensor's bit patterns, so any difference in any value is caught; the cost is one pass over the
    parameters and one small all-gather."""
    if not dist.enabled:
        return
    tensors = dict(params)
    for section, module in view_opt.modules.items():
        tensors.update((f"{section}.{n}", p) for n, p in module.named_parameters())
    names = list(tensors)
    tables = dist.gather_checksums(parameter_checksums(tensors[n] for n in names))
    reference = tables[0]
    for row, name in enumerate(names):
        differing: List[int] = [rank for rank, table in enumerate(tables) if not bool((table[row] == reference[row]).all())]
        if differing:
            counts = ", ".join(f"rank {r}: {int(tables[r][row][0]):,}" for r in [0, *differing])
            raise ReplicaDivergenceError(
                f"the replicas diverged {when}: parameter '{name}' differs from rank 0's on rank(s) "
                f"{', '.join(map(str, differing))} (elements {counts}); a hook or plugin made a different "
                "choice on some rank"
            )
