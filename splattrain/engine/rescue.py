"""Rescue checkpoints: after a failure, the state of the last completed step.

A step N is completed once its optimizer and scheduler updates are applied; its data position
and RNG states are then those a straight run has after step N. A failure before that point
(in ``before_train_iter``, rendering, the loss, ``before_backward`` or ``after_backward``) leaves
the Gaussians and optimizers as step N-1 left them, but the data pipeline has already served
step N's views: the trainer keeps the data position and RNG states taken before each step so
the rescue checkpoint is step N-1 exactly. Resuming from it reproduces a straight run.

Only torch's RNG states are taken before each step (python's and numpy's cost ~0.3 ms a
step to read): a hook that draws from python's or numpy's global RNG during a step that then
fails is not rewound; splattrain itself draws from neither during a step.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from ..checkpoint import save_checkpoint_file, step_checkpoints

if TYPE_CHECKING:  # pragma: no cover
    from .trainer import DefaultTrainer


def state_before_step(trainer: "DefaultTrainer") -> Dict[str, Any]:
    """The data position and torch's RNG states before the step about to run (a few microseconds)."""
    rng: Dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {"data": trainer.data.state_dict(), "rng": rng}


def rescue_path(trainer: "DefaultTrainer", step: int) -> Path:
    """Where the rescue checkpoint of ``step`` goes."""
    return trainer.checkpoint_dir / f"rescue_step_{step:06d}.pt"


def last_good_checkpoint(trainer: "DefaultTrainer") -> str:
    """Where the run's newest step checkpoint is (checkpoints always hold Gaussians), as a phrase."""
    saved = step_checkpoints(trainer.checkpoint_dir)
    if not saved:
        return "no checkpoint was saved before it"
    return f"its last checkpoint with Gaussians is {saved[0]} (resume with --resume {saved[0]})"


def save_rescue_checkpoint(trainer: "DefaultTrainer", error: BaseException) -> Optional[Path]:
    """Write ``ckpt/rescue_step_XXXXXX.pt`` of the last completed step, when a step was completed
    since the run (or its resume) started; returns its path, or None when nothing was saved. A
    model emptied by pruning is not saved: it is no step's state, and nothing can train from it."""
    completed = trainer.completed_step
    if completed <= trainer.start_step or not getattr(trainer, "is_main", True):
        return None  # nothing trained since the start (its starting point is the rescue); or not rank 0
    if trainer.model.num_gaussians == 0:
        return None
    path = rescue_path(trainer, completed)
    unfinished = completed < trainer.step
    current = trainer.step
    trainer.step = completed
    try:
        checkpoint = trainer.checkpoint_state()
    finally:
        trainer.step = current
    if unfinished and trainer.state_before_step is not None:
        checkpoint["data"] = trainer.state_before_step["data"]
        checkpoint["rng"] = {**checkpoint["rng"], **trainer.state_before_step["rng"]}
    save_checkpoint_file(checkpoint, path)
    trainer.console.warning(
        f"the run failed ({type(error).__name__}); saved a rescue checkpoint of step {completed} "
        f"to {path}. Resume with: {trainer.resume_hint} {shlex.quote(str(path))}"
    )
    return path
