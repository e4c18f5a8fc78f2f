"""The Trainer protocol's read-only properties and the steering calls that only delegate to the
components a trainer holds. :class:`~splattrain.engine.DefaultTrainer` derives from it; it holds
no state of its own and assigns nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..protocol import GaussiansMoved
from ..io.gaussians_file import FORMATS
from . import checkpointing
from .row_edits import RowEdits


#: What a published checkpoint keeps: enough to evaluate, render and export.
PUBLISHED_KEYS = ("version", "step", "config", "sh_degree", "gaussians", "last_metrics", "world_transform", "renderer")


class SteeringCalls:
    """Delegations over ``dist``, ``schedule``, ``run_folder``, ``strategy``, ``model``,
    ``optimizers``, ``strategy_state``, ``row_edits``, ``data`` and ``renderer``, which the trainer sets."""

    cfg: Any
    dist: Any
    schedule: Any
    run_folder: Any
    strategy: Any
    model: Any
    optimizers: Dict[str, torch.optim.Optimizer]
    strategy_state: Dict[str, Any]
    data: Any
    renderer: Any
    console: Any
    checkpoint_state: Any  # the trainer's method: the state of the current step, hooks' additions included
    row_edits: RowEdits  # the row changes held during a step

    # -- what hooks read ------------------------------------------------------------
    @property
    def run_name(self) -> str:
        """The run's ``name``."""
        return str(self.cfg.name)

    @property
    def max_steps(self) -> int:
        """The run's last step."""
        return self.schedule.max_steps

    @property
    def checkpoint_dir(self) -> Path:
        """Where the run's checkpoints go (``checkpoint_dir``, default ``<output_dir>/ckpt``)."""
        return self.run_folder.checkpoint_dir

    @property
    def rank(self) -> int:
        """This process's rank (0 in a single process)."""
        return self.dist.rank

    @property
    def world_size(self) -> int:
        """The number of ranks training together."""
        return self.dist.world_size

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes files and prints."""
        return self.dist.is_main

    def cap_gaussians(self, limit: Optional[int]) -> None:
        """Bound densification's growth at ``limit`` Gaussians (with the strategy's own cap)."""
        self.strategy.limit_growth(limit)

    # -- row changes: at once, or held while the step's gradients are live (see row_edits) --------
    def add_gaussians(self, values: Dict[str, torch.Tensor]) -> None:
        """Append new Gaussians with the given parameter values (one [M, ...] tensor per parameter)."""
        self.row_edits.ask("add", values, self.model.params, self._change_rows)

    def clone_gaussians(self, mask: torch.Tensor) -> None:
        """Append a copy of each Gaussian where ``mask`` is True."""
        self.row_edits.ask("clone", mask, self.model.params, self._change_rows)

    def split_gaussians(self, mask: torch.Tensor) -> None:
        """Replace each Gaussian where ``mask`` is True by two drawn inside it."""
        self.row_edits.ask("split", mask, self.model.params, self._change_rows)

    def remove_gaussians(self, mask: torch.Tensor) -> None:
        """Remove the Gaussians where ``mask`` is True, with their optimizer and strategy state."""
        self.row_edits.ask("remove", mask, self.model.params, self._change_rows)

    def _change_rows(self, kind: str, payload: Any) -> None:
        """Carry out one row change through the strategy's row calls (ops, state, listeners)."""
        change = getattr(self.strategy, f"{kind}_gaussians")
        change(self.model.params, self.optimizers, self.strategy_state, payload)

    def on_gaussians_moved(self, listener: GaussiansMoved) -> None:
        """Call ``listener(sources, params)`` whenever the strategy or a row call changes the rows."""
        self.strategy.add_reindex_listener(listener)

    def learning_rates(self) -> Dict[str, float]:
        """The current learning rate of each parameter group."""
        return {name: optimizer.param_groups[0]["lr"] for name, optimizer in self.optimizers.items()}

    def max_over_ranks(self, values: Sequence[float]) -> List[float]:
        """The largest of each value over the ranks."""
        return self.dist.max_over_ranks(list(values))

    def export_scene(self, name: str, fmt: str = "ply") -> Optional[Path]:
        """Write the current Gaussians to ``<run_dir>/<name>`` in ``fmt`` (rank 0), with the renderer's
        render-time transform folded in (``Renderer.export_gaussians``)."""
        if not self.is_main:
            return None
        antialiased = self.renderer.rasterize_mode == "antialiased"
        params = self.renderer.export_gaussians(self.model).params
        return self.run_folder.write_scene(name, params, fmt, antialiased)

    def publish(self, formats: Sequence[str]) -> Optional[Path]:
        """Write ``ckpt/published.pt`` (no training state) and ``scene.<ext>`` in each format (rank 0)."""
        state = {key: value for key, value in self.checkpoint_state().items() if key in PUBLISHED_KEYS}
        if not self.is_main:  # every rank builds the state (hooks may compare ranks); rank 0 writes
            return None
        for fmt in formats:
            self.export_scene(f"scene.{FORMATS[fmt]}", fmt)
        return self.run_folder.write_checkpoint(state, "published")

    def read_checkpoint(self, source: str | Path) -> tuple[Path, Dict[str, Any]]:
        """Find, load and check ``source`` (a path, or ``"latest"``) against this run; changes nothing."""
        return checkpointing.read_checkpoint(self, source, self.checkpoint_dir, self.console.warning)
