"""The run state: everything a run changes as it trains, in one value the trainer owns.

The components (model, renderer, data, strategy, view corrections) hold their own tensors; the
:class:`RunState` holds the rest: where the run is, its optimizers and schedulers, the strategy's
running state, its clock and loss average, the last validation, and why it stopped. Checkpoints
capture and restore it (:mod:`~splattrain.engine.checkpointing`), the report reads it
(:mod:`~splattrain.engine.run_report`); hooks read it through the trainer's properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from ..optim.optimizers import ParamScheduler
from .clock import LossAverage, Stopwatch


@dataclass
class RunState:
    """One run's state. ``step`` is the running (or last completed) step; ``completed_step`` the
    last whose update is applied; ``start_step`` the step the run (or its resume) started at;
    ``before_step`` the data position and RNG states before the running step (what a rescue
    checkpoint needs); ``stopped`` is ``{step, reason}`` once a requested stop ended the run."""

    optimizers: Dict[str, torch.optim.Optimizer]
    schedulers: List[ParamScheduler]
    strategy_state: Dict[str, Any]
    loss_average: LossAverage  #: the one average of the loss
    stopwatch: Stopwatch = field(default_factory=Stopwatch)  #: the one clock of the steps
    step: int = 0
    start_step: int = 0
    completed_step: int = 0
    before_step: Optional[Dict[str, Any]] = None
    last_metrics: Dict[str, Any] = field(default_factory=dict)  #: the last validation's mean metrics
    val_per_view: List[Dict[str, Any]] = field(default_factory=list)  #: the last validation's per-view scores
    stopped: Optional[Dict[str, Any]] = None

    @property
    def train_seconds(self) -> float:
        """Time spent in training steps so far, pauses left out (a resumed run's included)."""
        return self.stopwatch.total_seconds
