"""Row changes with everything that follows the rows: the part of the strategy base class that
adds, clones, splits and removes Gaussians through :mod:`splattrain.strategy.ops` (parameters,
optimizer state and the strategy's per-Gaussian state together) and tells the listeners."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping

import torch
from torch import Tensor

from . import ops

#: Called with ``sources`` (LongTensor [N_new]: the row each Gaussian continues, -1 for one that was
#: created or re-initialised and starts from its current values) and the parameters after the change.
ReindexListener = Callable[[Tensor, Mapping[str, Tensor]], None]


def check_mask(mask: Tensor, count: int, what: str) -> None:
    """ValueError unless ``mask`` is a bool tensor of one entry per Gaussian (``count``)."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.dim() != 1 or len(mask) != count:
        shown = f"a {mask.dtype} tensor of shape {list(mask.shape)}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{what}: the mask must be a bool tensor of {count} entries (one per Gaussian), got {shown}")


class RowChanges:
    """Adding, cloning, splitting and removing Gaussians, and the listeners that hear of it.

    Every call here keeps ``params``, each optimizer's state and the per-Gaussian entries of
    ``state`` (:meth:`per_gaussian`) aligned, and reports the change with :meth:`reindexed`. The
    trainer's steering calls (``trainer.clone_gaussians`` and friends) use them too.
    """

    def per_gaussian(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The part of ``state`` holding one row per Gaussian (every tensor, by default)."""
        return state

    @property
    def _reindex_listeners(self) -> List[ReindexListener]:
        listeners = self.__dict__.get("_listeners")
        if listeners is None:
            listeners = self.__dict__["_listeners"] = []
        return listeners

    def add_reindex_listener(self, listener: ReindexListener) -> None:
        """Call ``listener(sources, params)`` after every op that moves, adds or removes Gaussians."""
        if listener not in self._reindex_listeners:
            self._reindex_listeners.append(listener)

    def reindexed(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        """Tell the listeners how rows moved: ``sources[i]`` is the old row of new row ``i`` (-1: new)."""
        for listener in self._reindex_listeners:
            listener(sources, params)

    def _on_rows(self, state: Dict[str, Any], change: Callable[[Dict[str, Any]], None]) -> None:
        """Apply ``change`` to the per-Gaussian part of ``state`` and write it back."""
        per_gaussian = self.per_gaussian(state)
        change(per_gaussian)
        state.update(per_gaussian)

    def remove_gaussians(self, params, optimizers, state: Dict[str, Any], mask: Tensor) -> int:
        """Remove the Gaussians where ``mask`` is True, with their optimizer and strategy state,
        and tell the listeners; returns how many went."""
        check_mask(mask, len(params["means"]), "remove_gaussians")
        self._on_rows(state, lambda rows: ops.remove(params, optimizers, rows, mask))
        self.reindexed((~mask).nonzero(as_tuple=True)[0], params)
        return int(mask.sum())

    def clone_gaussians(self, params, optimizers, state: Dict[str, Any], mask: Tensor) -> int:
        """Append a copy of each Gaussian where ``mask`` is True (:func:`ops.duplicate`: the copy
        has the original's strategy statistics and fresh Adam state); returns how many were added."""
        check_mask(mask, len(params["means"]), "clone_gaussians")
        n = int(mask.sum())
        if n:
            rows = torch.arange(len(mask), device=mask.device)
            self._on_rows(state, lambda per: ops.duplicate(params, optimizers, per, mask))
            self.reindexed(torch.cat([rows, rows.new_full((n,), -1)]), params)
        return n

    def split_gaussians(self, params, optimizers, state: Dict[str, Any], mask: Tensor) -> int:
        """Replace each Gaussian where ``mask`` is True by two drawn inside it (:func:`ops.split`,
        with the strategy's ``revised_opacity`` where it has one); the kept ones come first. Returns
        how many were split (the scene grows by as many)."""
        check_mask(mask, len(params["means"]), "split_gaussians")
        n = int(mask.sum())
        if n:
            revised = bool(getattr(self, "revised_opacity", False))
            self._on_rows(state, lambda per: ops.split(params, optimizers, per, mask, revised_opacity=revised))
            kept = (~mask).nonzero(as_tuple=True)[0]
            self.reindexed(torch.cat([kept, kept.new_full((2 * n,), -1)]), params)
        return n

    def add_gaussians(self, params, optimizers, state: Dict[str, Any], values: Mapping[str, Tensor]) -> int:
        """Append new Gaussians with the given parameter values (:func:`ops.append`: a value
        [M, ...] for every parameter; zero statistics and Adam state); returns M."""
        before = len(params["means"])
        self._on_rows(state, lambda per: ops.append(params, optimizers, per, values))
        n = len(params["means"]) - before
        if n:
            rows = torch.arange(before, device=params["means"].device)
            self.reindexed(torch.cat([rows, rows.new_full((n,), -1)]), params)
        return n
