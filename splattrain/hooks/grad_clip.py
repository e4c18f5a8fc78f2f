"""GradClipHook: gradient-norm clipping at a fixed or an adaptive threshold."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook, Priority

MODES = ("pre_defined", "average", "moving_average")


@HOOKS.register()
class GradClipHook(Hook):
    """Clips the joint gradient norm of chosen parameter groups after backward, before densification.

    Modes (the names of United-Perception's gradient clipper):

    - ``pre_defined``: clip at ``max_norm``.
    - ``average``: clip at ``tolerance`` x the mean of the norms of all earlier steps.
    - ``moving_average``: clip at ``tolerance`` x a moving average of earlier norms,
      ``m = (1 - momentum) * m + momentum * norm`` (MMEngine's EMA convention: ``momentum``
      weighs the newest norm).

    The history holds the norm each step applied (after clipping), so one outlier cannot
    raise the threshold for the steps after it; the adaptive modes do not clip their first
    step, which starts the history. The norm is taken over every Gaussian's gradients, so
    it follows the Gaussian count as densification changes it. Each step the norm before
    and after clipping and the threshold go to ``trainer.runtime_info`` (``grad_norm/*``,
    written by LogHook at its interval). The history is kept in checkpoints. Steps another
    hook dropped (``outputs["skip_update"]``) are left alone.

    Args:
        mode: pre_defined | average | moving_average.
        max_norm: the threshold of ``pre_defined``.
        norm_type: the p of the p-norm (``inf`` for the largest absolute value).
        tolerance: multiple of the (moving) average to clip at; >= 1.
        momentum: weight of the newest norm in ``moving_average``, in (0, 1].
        groups: parameter groups to clip together (means, scales, quats, opacities, sh0, shN);
            default all.
    """

    priority = Priority.HIGH

    def __init__(
        self,
        mode: str = "pre_defined",
        max_norm: Optional[float] = None,
        norm_type: float = 2.0,
        tolerance: float = 2.0,
        momentum: float = 0.1,
        groups: Optional[Sequence[str]] = None,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ConfigError(f"GradClipHook mode {mode!r}: use one of {', '.join(MODES)}")
        if mode == "pre_defined" and (max_norm is None or max_norm <= 0):
            raise ConfigError("GradClipHook mode pre_defined needs max_norm > 0")
        if tolerance < 1.0:
            raise ConfigError(f"GradClipHook tolerance {tolerance}: must be >= 1 (below 1 the history only shrinks)")
        if not 0.0 < momentum <= 1.0:
            raise ConfigError(f"GradClipHook momentum {momentum}: must be in (0, 1]")
        self.mode = mode
        self.max_norm = max_norm
        self.norm_type = float(norm_type)
        self.tolerance = tolerance
        self.momentum = momentum
        self.groups: Optional[List[str]] = list(groups) if groups is not None else None
        self.count = 0  # steps in the history
        self.total = 0.0  # sum of the applied norms
        self.average: Optional[float] = None  # moving average of the applied norms
        self.clipped = 0  # steps that were clipped

    def before_train(self, trainer) -> None:
        unknown = sorted(set(self.groups or []) - set(trainer.model.params.keys()))
        if unknown:
            raise ConfigError(f"GradClipHook groups: {', '.join(unknown)} not a parameter group "
                              f"(groups: {', '.join(trainer.model.params.keys())})")

    def threshold(self) -> Optional[float]:
        """The norm the next step is clipped at (None: not clipped)."""
        if self.mode == "pre_defined":
            return self.max_norm
        if self.count == 0:
            return None
        return self.tolerance * (self.total / self.count if self.mode == "average" else self.average)

    def after_backward(self, trainer, step: int, outputs: Dict[str, Any]) -> None:
        if outputs.get("skip_update"):
            return
        names = self.groups or list(trainer.model.params.keys())
        grads = [p.grad for p in (trainer.model.params[n] for n in names) if p.grad is not None and p.numel()]
        if not grads:
            return
        before = self._norm(grads)
        limit = self.threshold()
        after = before
        if limit is not None and before > limit:
            for grad in grads:
                grad.mul_(limit / before)
            after = self._norm(grads)
            self.clipped += 1
        if math.isfinite(after):
            self._record(after)
        trainer.runtime_info.update({"grad_norm/before": before, "grad_norm/after": after})
        if limit is not None:
            trainer.runtime_info["grad_norm/threshold"] = limit

    def _norm(self, grads: List[torch.Tensor]) -> float:
        """The p-norm of all ``grads`` together."""
        norms = torch.stack([torch.linalg.vector_norm(g, self.norm_type) for g in grads])
        return float(torch.linalg.vector_norm(norms, self.norm_type))

    def _record(self, norm: float) -> None:
        self.count += 1
        self.total += norm
        self.average = norm if self.average is None else (1.0 - self.momentum) * self.average + self.momentum * norm

    def state_dict(self) -> Dict[str, Any]:
        return {"count": self.count, "total": self.total, "average": self.average, "clipped": self.clipped}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.count = int(state["count"])
        self.total = float(state["total"])
        self.average = state["average"]
        self.clipped = int(state["clipped"])
