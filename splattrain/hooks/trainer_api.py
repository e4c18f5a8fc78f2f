"""What hooks and plugins may read and call on the trainer: the :class:`Trainer` protocol, the
:class:`StepOutputs` of a training step and the validation outputs.

Hooks receive the trainer as their first argument. They read its state and steer the run only
through the calls below (``request_stop``, ``request_validation``, ``request_checkpoint``); they do
not assign trainer attributes (the engine resolves run folders and the rescue policy from config).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Protocol, runtime_checkable

import torch
from omegaconf import DictConfig
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from ..console import Console
    from ..data.pipeline import DataPipeline
    from ..distributed.context import DistContext
    from ..losses.composite import Loss
    from ..metrics import Evaluator
    from ..model.gaussians import GaussianModel
    from ..render.base import Renderer, RenderResult
    from ..strategy.protocol import Strategy
    from ..view_opt.corrections import ViewCorrections
    from ..writers.base import WriterGroup


@dataclass
class StepOutputs:
    """What a training step produced, passed to ``after_backward`` and ``after_train_iter``.

    ``render`` is the last micro-batch's render, ``losses`` the loss terms by name (``loss`` is the
    weighted sum) averaged over micro-batches and ranks, ``batch`` the step's views. An
    ``after_backward`` hook may set ``skip_update`` to drop the step's update (densification
    statistics and optimizer step). ``outputs["losses"]``-style access works as well.
    """

    render: "RenderResult"
    losses: Dict[str, Tensor]
    sh_degree: int
    batch: Dict[str, Any]
    skip_update: bool = False

    def _field(self, key: str) -> str:
        if key not in _STEP_FIELDS:
            raise KeyError(key)
        return key

    def __getitem__(self, key: str) -> Any:
        return getattr(self, self._field(key))

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, self._field(key), value)

    def __contains__(self, key: object) -> bool:
        return key in _STEP_FIELDS

    def __iter__(self) -> Iterator[str]:
        return iter(_STEP_FIELDS)

    def get(self, key: str, default: Any = None) -> Any:
        """``outputs[key]``, or ``default`` for a name that is not a field."""
        return getattr(self, key) if key in _STEP_FIELDS else default


_STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepOutputs))


@runtime_checkable
class Trainer(Protocol):
    """The trainer as hooks and plugins see it (:class:`~splattrain.engine.DefaultTrainer` is one).

    Validation calls ``after_val_iter(index, batch, {"render": RenderResult, "metrics": scores})``
    per test view and ``after_val(metrics)`` with the mean metrics (``step``, ``psnr``, ``ssim``,
    ``lpips`` when on); ``console`` has ``info`` / ``warning`` (only rank 0 prints).
    """

    cfg: DictConfig  #: the resolved config (read only)
    console: "Console"
    run_dir: Path
    checkpoint_dir: Path  #: resolved from config (``default_hooks.checkpoint.out_dir`` or ``run_dir/ckpt``)
    device: torch.device
    step: int  #: the running (or last) step, from 1
    max_steps: int
    data: "DataPipeline"
    model: "GaussianModel"
    renderer: "Renderer"
    loss: "Loss"
    optimizers: Dict[str, torch.optim.Optimizer]
    schedulers: List[Any]
    strategy: "Strategy"
    strategy_state: Dict[str, Any]
    view_opt: "ViewCorrections"
    writers: "WriterGroup"
    evaluator: Optional["Evaluator"]
    last_metrics: Dict[str, Any]  #: the last validation's mean metrics
    val_per_view: List[Dict[str, Any]]  #: the last validation's per-view scores
    dist: "DistContext"
    resume_hint: str  #: the command that resumes this run

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_main(self) -> bool: ...

    @property
    def stop_reason(self) -> Optional[str]:
        """Why the run was asked to stop (None while it goes on)."""

    def request_stop(self, reason: str) -> None:
        """End the run after the current step (every rank at the same step), with a final
        validation, a checkpoint and ``results.json`` recording ``stopped: {step, reason}``."""

    def request_validation(self) -> None:
        """Validate after the current step (once, even if validation is due anyway)."""

    def request_checkpoint(self) -> None:
        """Save a resumable checkpoint after the current step."""

    def validate(self) -> Dict[str, Any]: ...

    def save_checkpoint(self, path: Path, link_last: bool = True) -> Path: ...

    def checkpoint_state(self) -> Dict[str, Any]: ...

    def call_hook(self, point: str, *args: Any) -> None: ...
