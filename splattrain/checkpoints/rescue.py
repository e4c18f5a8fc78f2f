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
from typing import Any, Callable, Dict, Optional

import torch

from ..data.pipeline import DataPipeline
from .files import save_checkpoint_file


def state_before_step(data: DataPipeline) -> Dict[str, Any]:
    """The data position and torch's RNG states before the step about to run (a few microseconds)."""
    rng: Dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {"data": data.state_dict(), "rng": rng}


def save(checkpoint: Dict[str, Any], before: Optional[Dict[str, Any]], path: Path, error: BaseException,
         warn: Callable[[str], None], resume_hint: str) -> Path:
    """Write the rescue ``checkpoint`` of the last completed step to ``path``; ``before`` (the data
    position and RNG states before the failed step after it, None when no step was running)
    replaces the checkpoint's, which the failed step moved on."""
    if before is not None:
        checkpoint["data"] = before["data"]
        checkpoint["rng"] = {**checkpoint["rng"], **before["rng"]}
    save_checkpoint_file(checkpoint, path)
    warn(f"the run failed ({type(error).__name__}); saved a rescue checkpoint of step {checkpoint['step']} "
         f"to {path}. Resume with: {resume_hint} {shlex.quote(str(path))}")
    return path
