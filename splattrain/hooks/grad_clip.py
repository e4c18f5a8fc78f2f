"""GradClipHook: gradient-norm clipping at a fixed or an adaptive threshold."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from . import state as state_values
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
    and after clipping and the threshold (inf until an adaptive history starts) go to ``trainer.runtime_info`` (``grad_norm/*``, as device
    tensors, read back by LogHook at its interval: the hook itself never waits for the device). The history is kept in checkpoints. Steps another
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

    rank_consistent = True  # it clips the averaged gradients and never skips

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
        # The history lives on the gradients' device (moved there at first use) so that a step
        # never waits for the device: count of steps in it, sum and moving average of the
        # applied norms, clipped steps. The properties below read it back (a host sync).
        self._history: Dict[str, Any] = {"count": 0, "total": 0.0, "average": None, "clipped": 0}

    @property
    def count(self) -> int:
        """Steps in the history."""
        return int(self._history["count"])

    @property
    def total(self) -> float:
        """Sum of the applied norms."""
        return float(self._history["total"])

    @property
    def average(self) -> Optional[float]:
        """Moving average of the applied norms (None before the first)."""
        return None if self.count == 0 else float(self._history["average"])

    @property
    def clipped(self) -> int:
        """Steps that were clipped."""
        return int(self._history["clipped"])

    def before_train(self, trainer) -> None:
        unknown = sorted(set(self.groups or []) - set(trainer.model.params.keys()))
        if unknown:
            raise ConfigError(f"GradClipHook groups: {', '.join(unknown)} not a parameter group "
                              f"(groups: {', '.join(trainer.model.params.keys())})")

    def threshold(self) -> Optional[float]:
        """The norm the next step is clipped at (None: not clipped); reads the device."""
        if self.mode == "pre_defined":
            return self.max_norm
        if self.count == 0:
            return None
        count = self._history["count"]
        return float(self._limit(count.device if isinstance(count, torch.Tensor) else torch.device("cpu")))

    def _limit(self, device: torch.device) -> torch.Tensor:
        """The threshold as a tensor on ``device``: inf while the adaptive history is empty."""
        if self.mode == "pre_defined":
            return torch.full((), float(self.max_norm), device=device)  # a fill, no host-to-device copy
        h = self._on(device)
        mean = h["total"] / h["count"] if self.mode == "average" else h["average"]
        return torch.where(h["count"] > 0, self.tolerance * mean, torch.full_like(mean, math.inf))

    def _on(self, device: torch.device) -> Dict[str, torch.Tensor]:
        """The history as tensors on ``device`` (converted once; checkpoints hold numbers)."""
        h = self._history
        if not isinstance(h["count"], torch.Tensor) or h["count"].device != device:
            average = 0.0 if h["average"] is None else h["average"]
            real = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
            self._history = h = {
                "count": torch.as_tensor(h["count"], dtype=torch.int64, device=device),
                "total": torch.as_tensor(h["total"], dtype=real, device=device),
                "average": torch.as_tensor(average, dtype=real, device=device),
                "clipped": torch.as_tensor(h["clipped"], dtype=torch.int64, device=device),
            }
        return h

    def after_backward(self, trainer, step: int, outputs: Dict[str, Any]) -> None:
        if outputs.get("skip_update"):
            return
        names = self.groups or list(trainer.model.params.keys())
        grads = [p.grad for p in (trainer.model.params[n] for n in names) if p.grad is not None and p.numel()]
        if not grads:
            return
        device = grads[0].device
        before = self._norm(grads)
        limit = self._limit(device)
        clip = before > limit  # False for a NaN norm, as for an empty history
        factor = torch.where(clip, limit / before, torch.ones_like(before)).to(grads[0].dtype)
        for grad in grads:
            grad.mul_(factor)
        after = torch.where(clip, self._norm(grads), before)
        self._record(after, clip, device)
        trainer.runtime_info.update({"grad_norm/before": before, "grad_norm/after": after, "grad_norm/threshold": limit})

    def _norm(self, grads: List[torch.Tensor]) -> torch.Tensor:
        """The p-norm of all ``grads`` together (a float64 tensor on their device)."""
        norms = torch.stack([torch.linalg.vector_norm(g, self.norm_type) for g in grads])
        norm = torch.linalg.vector_norm(norms, self.norm_type)
        return norm if norm.device.type == "mps" else norm.double()

    def _record(self, norm: torch.Tensor, clip: torch.Tensor, device: torch.device) -> None:
        h = self._on(device)
        finite = torch.isfinite(norm)
        value = torch.where(finite, norm, torch.zeros_like(norm))
        first = h["count"] == 0
        moved = (1.0 - self.momentum) * h["average"] + self.momentum * value
        h["average"] = torch.where(finite, torch.where(first, value, moved), h["average"])
        h["total"] = h["total"] + value
        h["count"] = h["count"] + finite.long()
        h["clipped"] = h["clipped"] + clip.long()

    def state_dict(self) -> Dict[str, Any]:
        return {"count": self.count, "total": self.total, "average": self.average, "clipped": self.clipped}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._history = {"count": state_values.whole(state, "count", minimum=0),
                         "total": state_values.number(state, "total"),
                         "average": state_values.number(state, "average", optional=True),
                         "clipped": state_values.whole(state, "clipped", minimum=0)}
