"""What hooks and plugins may read and call on the trainer: the :class:`Trainer` protocol, the
:class:`RunSchedule` every step reads, the :class:`StepOutputs` of a training step.

Hooks receive the trainer as their first argument. They read what the protocol lists and steer
the run only through its calls (stop, validate, checkpoint, pause, cap or remove Gaussians); they
never assign trainer attributes. Hooks decide *when*; the engine *does*: a checkpoint or a pause
asked during a step is carried out after the step and its validation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

import torch
from torch import Tensor

from .model.gaussians import degree_for_step

if TYPE_CHECKING:  # pragma: no cover
    from .console import Console
    from .data.pipeline import DataPipeline
    from .losses.composite import Loss
    from .model.gaussians import GaussianModel
    from .render.base import Renderer, RenderResult
    from .writers.base import WriterGroup


@dataclass
class StepOutputs:
    """What a training step produced, passed to ``after_backward`` and ``after_train_iter``.

    ``render`` is the last micro-batch's render, ``losses`` the loss terms by name (``loss`` is the
    weighted sum) averaged over micro-batches and ranks, ``batch`` the step's views,
    ``view_losses`` each micro-batch's own terms with its views' names (this rank's). An
    ``after_backward`` hook may set ``skip_update`` to drop the step's update (densification
    statistics and optimizer step). ``outputs["losses"]``-style access works as well.
    """

    render: "RenderResult"
    losses: Dict[str, Tensor]
    sh_degree: int
    batch: Dict[str, Any]
    skip_update: bool = False
    view_losses: List[Tuple[List[str], Dict[str, Tensor]]] = dataclasses.field(default_factory=list)

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


@dataclass(frozen=True)
class RunSchedule:
    """The run's step settings after scaling (``trainer.schedule_steps`` / ``steps_scaler``), fixed
    for the whole run: what the training loop and hooks read. ``scaled`` lists each setting the
    scaling changed, as ``"trainer.val_interval 300 (1500 scaled by 400/2000)"``."""

    max_steps: int  # trainer.max_steps
    batch_size: int  # trainer.batch_size: views rendered together
    views_per_step: int  # batch_size x optim.accumulate_steps
    val_interval: int  # trainer.val_interval (0: only at the last step)
    val_begin: int  # trainer.val_begin
    sh_degree: int  # model.sh_degree
    sh_degree_interval: int  # model.sh_degree_interval
    render_depth: bool  # training renders carry depth (trainer.render_depth, or a loss term reads it)
    scaled: Tuple[str, ...] = ()
    #: the step at which the strategy stops refining the scene (its ``refine_stop_iter`` after
    #: scaling, at most ``max_steps``); None when the strategy does not say
    densification_ends: Optional[int] = None

    def sh_degree_at(self, step: int) -> int:
        """The SH degree in force at ``step`` (raised by one every ``sh_degree_interval`` steps)."""
        return degree_for_step(step, self.sh_degree_interval, self.sh_degree)

    def validates_at(self, step: int) -> bool:
        """Whether validation runs after ``step`` (every ``val_interval`` from ``val_begin``, and the last)."""
        periodic = self.val_interval > 0 and step % self.val_interval == 0 and step >= self.val_begin
        return step == self.max_steps or periodic


@dataclass(frozen=True)
class StepClock:
    """The engine's clock as of the last timed step (``trainer.clock``): every reading of step time
    hooks, the log and the viewer show. A step is timed from the end of the one before (its
    ``after_train_iter`` hooks included) up to its own ``after_train_iter``; time outside the
    steps (validation and checkpoints between them, pauses) is left out. A new reading replaces
    it at each step, just before ``after_train_iter``; before the first step every value is 0."""

    step: int = 0  #: the step these readings are of
    step_seconds: float = 0.0  #: the step's wall time, pauses left out
    data_seconds: float = 0.0  #: of which getting the step's batch
    mean_step_seconds: float = 0.0  #: running mean of ``step_seconds`` (0.9 old + 0.1 new)
    eta_seconds: float = 0.0  #: ``mean_step_seconds`` times the steps left to ``max_steps``
    timed_steps: int = 0  #: steps timed since the run (or its resume) started
    timed_seconds: float = 0.0  #: their ``step_seconds`` summed (a mean over any span: differences)

    @property
    def steps_per_second(self) -> float:
        """``1 / mean_step_seconds`` (0 before the first step)."""
        return 1.0 / self.mean_step_seconds if self.mean_step_seconds > 0 else 0.0


#: Called with ``sources`` (LongTensor [N_new]: the old row of each new row, -1 for a new Gaussian)
#: and the parameters after a densification or removal changed the rows.
GaussiansMoved = Callable[[torch.Tensor, Dict[str, torch.Tensor]], None]


@dataclass(frozen=True)
class StrategyContext:
    """What a densification strategy sees of a training step beyond its ``info``: handed to
    ``step_post_backward(..., context=...)`` once per step (when its signature takes ``context``).

    ``batch`` and ``render`` are this rank's: the step's views (``image`` [C,H,W,3], ``camera``,
    ``image_id``, ...) and the last micro-batch's render; ``infos`` holds every micro-batch's
    ``info`` in order (the last is ``render.info``); ``last_metrics`` the last validation's mean
    metrics ({} before the first); ``renderer`` the run's renderer (to render more views).
    """

    step: int
    batch: Dict[str, Any]
    render: "RenderResult"
    infos: List[Dict[str, Any]]
    last_metrics: Dict[str, Any]
    renderer: "Renderer"

    @property
    def info(self) -> Dict[str, Any]:
        """The last micro-batch's ``info`` (the one ``step_post_backward`` gets)."""
        return self.render.info


@runtime_checkable
class Trainer(Protocol):
    """The trainer as hooks and plugins see it (:class:`~splattrain.engine.DefaultTrainer` is one).

    Everything here is read only: hooks steer through the calls at the end. Validation calls
    ``after_val_iter(index, batch, {"render": RenderResult, "metrics": scores})`` per test view and
    ``after_val(metrics)`` with the mean metrics (``step``, ``psnr``, ``ssim``, ``lpips``; a metric
    that could not be computed is ``None``). ``console`` has ``info`` / ``warning`` / ``debug``
    (only rank 0 prints).
    """

    run_name: str  #: the run's ``name``
    console: "Console"
    run_dir: Path  #: the run folder (files a hook writes go inside it)
    checkpoint_dir: Path  #: where the run's checkpoints go (``checkpoint_dir``, default ``<run_dir>/ckpt``)
    device: torch.device
    step: int  #: the running (or last completed) step, from 1
    max_steps: int
    schedule: RunSchedule
    scene_scale: float  #: the training cameras' extent in world units
    background: torch.Tensor  #: [3] the validation background colour
    data: "DataPipeline"  #: the scene's views (train_frames, test_frames)
    model: "GaussianModel"
    renderer: "Renderer"
    loss: "Loss"
    writers: "WriterGroup"
    last_metrics: Dict[str, Any]  #: the last validation's mean metrics ({} before the first)
    val_per_view: List[Dict[str, Any]]  #: the last validation's per-view scores
    runtime_info: Dict[str, Any]  #: readings hooks publish for the log (``time/step``, ``grad_norm/before``)
    train_seconds: float  #: time spent in training steps so far (pauses left out)
    clock: StepClock  #: the step times of the last step (data, step, running mean, ETA)

    @property
    def loss_average(self) -> Optional[Tensor]:
        """The EMA of the steps' weighted loss (``trainer.loss_ema`` of the old value, 0.6 by default)
        as a copy of the 0-d float32 tensor the engine keeps on the loss's device (None before the
        first step); ``float()`` of it is the one read back to the host. Checkpointed with the run."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes files and prints."""

    @property
    def stop_reason(self) -> Optional[str]:
        """Why the run was asked to stop (None while it goes on)."""

    # -- steering --------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """End the run after the current step (every rank at the same step), with a final
        validation, a checkpoint and ``results.json`` recording ``stopped: {step, reason}``."""

    def request_validation(self) -> None:
        """Validate after the current step (once, even if validation is due anyway)."""

    def request_checkpoint(self, name: Optional[str] = None, keep_last: int = 0) -> None:
        """Save a resumable checkpoint after the current step and its validation (every rank
        alike; rank 0 writes): ``ckpt/step_XXXXXX.pt`` (and ``last.pt``) by default, ``ckpt/<name>.pt``
        when named (``best``); ``keep_last`` > 0 removes older step checkpoints beyond that many."""

    def keep_shadow(self, names: Sequence[str], validate: bool = True, export: bool = True) -> Dict[str, Tensor]:
        """Shadow copies of the parameter groups ``names`` (an average, as ``EMAHook`` keeps): live
        tensors the hook updates in place (never the model's own). The engine moves their rows with
        the Gaussians, swaps them into the model for each validation (``validate``) and after
        training (``export``; checkpoints then hold them as their Gaussians and the training weights
        under ``training_gaussians``), and after a resume hands back the checkpoint's."""

    def request_pause(self, wait: Callable[[], bool]) -> None:
        """Pause after the current step, its validation and checkpoints: the trainer calls ``wait()``
        (each call short, about 0.1 s) until it returns False or a stop signal comes, and saves the
        checkpoints asked meanwhile; the pause is left out of ``train_seconds`` and hooks hear
        ``on_pause(trainer, True)`` / ``(trainer, False)``."""

    def validate(self) -> Dict[str, Any]:
        """Validate now (every rank must call it); returns the mean metrics."""

    def export_scene(self, name: str, fmt: str = "ply") -> Optional[Path]:
        """Write the current Gaussians to ``<run_dir>/<name>`` in ``fmt`` (ply, ply-compressed, spz,
        splat) on rank 0; ``name`` may hold subfolders (``ply/step_000100.ply``)."""

    def publish(self, formats: Sequence[str]) -> Optional[Path]:
        """Write ``ckpt/published.pt`` (Gaussians and config, no training state) and the scene in each
        format (``scene.ply``, ...) on rank 0; returns the checkpoint's path."""

    def cap_gaussians(self, limit: Optional[int]) -> None:
        """Let densification grow the scene to at most ``limit`` Gaussians from now on (together with
        the strategy's own ``max_gaussians``; None lifts this bound). A ConfigError when the
        strategy cannot cap its growth."""

    # Row changes: each mask is over the rows ``model`` holds when the call is made. Made while a
    # step's gradients are live (the before_backward, after_backward and before_optimizer_step
    # hooks), a change is held and carried out right after the step's optimizer step and
    # densification, before the schedulers step and ``after_train_iter``, its mask following the
    # rows changed meanwhile; made anywhere else, at once. Every rank must make the same calls.
    def add_gaussians(self, values: Dict[str, torch.Tensor]) -> None:
        """Append new Gaussians: ``values[name]`` [M, ...] for every parameter (``means``,
        ``scales``, ``quats``, ``opacities``, ``sh0``, ``shN``, in the model's own units: log
        scales, opacity logits); their Adam state and strategy statistics start at zero."""

    def clone_gaussians(self, mask: torch.Tensor) -> None:
        """Append a copy of each Gaussian where ``mask`` ([N] bool) is True (strategy statistics
        copied, Adam state fresh), as the 3DGS densification clones."""

    def split_gaussians(self, mask: torch.Tensor) -> None:
        """Replace each Gaussian where ``mask`` ([N] bool) is True by two drawn inside it, 1.6x
        smaller (the kept Gaussians come first, then the pairs), as the 3DGS densification splits."""

    def remove_gaussians(self, mask: torch.Tensor) -> None:
        """Remove the Gaussians where ``mask`` ([N] bool) is True, with their optimizer and
        strategy state."""

    def on_gaussians_moved(self, listener: GaussiansMoved) -> None:
        """Call ``listener(sources, params)`` after every change of the rows: the strategy's
        densification and each of the row calls above."""

    def learning_rates(self) -> Dict[str, float]:
        """The current learning rate of each parameter group (``means``, ``scales``, ...)."""

    def max_over_ranks(self, values: Sequence[float]) -> List[float]:
        """The largest of each value over the ranks (the values themselves in a single process);
        every rank must call it at the same point."""
