"""The Trainer protocol's read-only properties (the run state's readings among them) and the
steering calls that only delegate to the components a trainer holds.
:class:`~splattrain.engine.DefaultTrainer` derives from it; it holds no state of its own and
assigns nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..io.gaussians_file import FORMATS
from ..optim.optimizers import ParamScheduler
from ..protocol import GaussiansMoved, StepClock
from .row_edits import RowEdits
from .run_state import RunState


#: What a published checkpoint keeps: enough to evaluate, render and export.
PUBLISHED_KEYS = ("version", "step", "config", "sh_degree", "gaussians", "last_metrics", "world_transform", "renderer")


class SteeringCalls:
    """Readings of ``state`` and delegations over ``dist``, ``schedule``, ``run_folder``,
    ``strategy``, ``model``, ``row_edits``, ``data`` and ``renderer``, which the trainer sets."""

    cfg: Any
    state: RunState  # what the run changes as it trains
    dist: Any
    schedule: Any
    run_folder: Any
    strategy: Any
    model: Any
    data: Any
    renderer: Any
    console: Any
    checkpoint_state: Any  # the trainer's method: the state of the current step, hooks' additions included
    row_edits: RowEdits  # the row changes held during a step

    # -- the run state, as hooks read it -----------------------------------------------
    @property
    def step(self) -> int:
        """The running (or last completed) step, from 1 (0 before the first)."""
        return self.state.step

    @property
    def optimizers(self) -> Dict[str, torch.optim.Optimizer]:
        """The optimizer of each parameter group."""
        return self.state.optimizers

    @property
    def schedulers(self) -> List[ParamScheduler]:
        """The learning-rate schedulers, stepped after each update."""
        return self.state.schedulers

    @property
    def strategy_state(self) -> Dict[str, Any]:
        """The densification strategy's running state."""
        return self.state.strategy_state

    @property
    def last_metrics(self) -> Dict[str, Any]:
        """The last validation's mean metrics ({} before the first)."""
        return self.state.last_metrics

    @property
    def val_per_view(self) -> List[Dict[str, Any]]:
        """The last validation's per-view scores."""
        return self.state.val_per_view

    @property
    def stopped(self) -> Optional[Dict[str, Any]]:
        """``{step, reason}`` once a requested stop ended the run, else None."""
        return self.state.stopped

    @property
    def train_seconds(self) -> float:
        """Time spent in training steps so far, pauses left out (a resumed run's included)."""
        return self.state.train_seconds

    @property
    def clock(self) -> StepClock:
        """The step times of the last step (see :class:`~splattrain.protocol.StepClock`)."""
        return self.state.stopwatch.reading

    @property
    def loss_average(self) -> Optional[torch.Tensor]:
        """A copy of the loss EMA on the loss's device (None before the first step)."""
        return self.state.loss_average.tensor

    # -- what hooks read of the run ---------------------------------------------------
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
        change(self.model.params, self.state.optimizers, self.state.strategy_state, payload)

    def on_gaussians_moved(self, listener: GaussiansMoved) -> None:
        """Call ``listener(sources, params)`` whenever the strategy or a row call changes the rows."""
        self.strategy.add_reindex_listener(listener)

    def learning_rates(self) -> Dict[str, float]:
        """The current learning rate of each parameter group."""
        return {name: optimizer.param_groups[0]["lr"] for name, optimizer in self.state.optimizers.items()}

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
        published = {key: value for key, value in self.checkpoint_state().items() if key in PUBLISHED_KEYS}
        if not self.is_main:  # every rank builds the state (hooks may compare ranks); rank 0 writes
            return None
        for fmt in formats:
            self.export_scene(f"scene.{FORMATS[fmt]}", fmt)
        return self.run_folder.write_checkpoint(published, "published")
