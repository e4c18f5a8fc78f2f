"""Per-image affine colour: each training view's render is mapped by its own 3x3 matrix and
offset before the loss (the exposure compensation of 3DGS, 2024)."""

from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from ..registry import APPEARANCE
from .base import ViewCorrection


@APPEARANCE.register("affine")
class AffineAppearance(ViewCorrection):
    """``rgb' = A_i rgb + b_i`` per training view ``i`` (A starts at identity, b at zero).

    Args:
        lr, lr_final: Adam learning rate, decayed exponentially to ``lr_final`` at the last step.
        weight_decay: pulls A - I and b towards zero (unused by 3DGS).
        clamp: clip the result to [0, 1] as a camera does, so saturated pixels (a bright exposure
            of a white wall) ask nothing of the scene.
        start: fraction of the run before the colours are corrected.
        start_step: the step after which they are, however long the run (overrides ``start``).
        stop_step: the step after which they are kept as learned.
    """

    def __init__(self, n_views: int, lr: float = 1e-2, lr_final: float = 1e-3, weight_decay: float = 0.0,
                 clamp: bool = True, start: float = 0.0, start_step: Optional[int] = None,
                 stop_step: Optional[int] = None) -> None:
        super().__init__(n_views, lr, lr_final, weight_decay, start, start_step, stop_step)
        self.clamp = clamp
        self.delta = torch.nn.Parameter(torch.zeros(n_views, 3, 4))  # [A - I | b]

    def apply(self, rgb: Tensor, view_ids: Tensor) -> Tensor:
        """The renders [C,H,W,3] of training views ``view_ids`` [C] in their own appearance."""
        delta = self.delta[view_ids.to(self.delta.device)]
        matrix = delta[:, :, :3] + torch.eye(3, device=rgb.device)
        out = torch.einsum("cij,chwj->chwi", matrix, rgb) + delta[:, None, None, :, 3]
        return out.clamp(0.0, 1.0) if self.clamp else out

    def report(self) -> Dict[str, float]:
        """Mean and largest per-view gain (mean diagonal of A) departure from 1, and offset size."""
        with torch.no_grad():
            gains = torch.diagonal(self.delta[:, :, :3], dim1=1, dim2=2).mean(dim=1)
            return {
                "appearance_gain_mean_abs": float(gains.abs().mean()),
                "appearance_gain_max_abs": float(gains.abs().max()),
                "appearance_offset_max_abs": float(self.delta[:, :, 3].abs().max()),
            }
