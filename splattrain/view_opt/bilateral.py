"""Per-image bilateral grids: colour corrections that vary over the image and with brightness
(vignetting, local tone mapping, a phone's HDR), learned per training view.

The idea is that of the bilateral-grid appearance of gsplat and "Bilateral Guided Radiance Field
Processing" (Wang et al. 2024); this is splattrain's own plain-PyTorch version.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError
from ..registry import APPEARANCE
from .base import ViewCorrection

#: Rec. 601 luma, the grid's third axis.
LUMA = (0.299, 0.587, 0.114)


@APPEARANCE.register("bilateral")
class BilateralGridAppearance(ViewCorrection):
    """Per training view, affine colour maps on a grid over image position and luminance.

    The grid has ``grid x grid`` cells over the image and ``bins`` over luminance; every cell
    holds a 3x4 affine colour map (starting at identity). A pixel's map is
    the trilinear interpolation of the cells at its position and luminance:
    ``rgb' = A(x, y, luma) rgb + b(x, y, luma)``.

    A total-variation penalty (``tv_weight`` times the mean squared difference of neighbouring
    cells, over the step's views) is added to the loss as ``loss/view_opt`` and keeps the maps
    smooth, so they model the camera, not the scene.

    Args:
        lr, lr_final: Adam learning rate, decayed exponentially to ``lr_final`` at the last step.
        weight_decay: pulls every map towards identity.
        grid: cells along each image axis.
        bins: cells along luminance.
        tv_weight: weight of the smoothness penalty.
        clamp: clip the result to [0, 1] as a camera does.
        start: fraction of the run before the colours are corrected.
        start_step: the step after which they are, however long the run (overrides ``start``).
        stop_step: the step after which they are kept as learned.
    """

    def __init__(self, n_views: int, lr: float = 2e-3, lr_final: float = 2e-4, weight_decay: float = 0.0,
                 grid: int = 8, bins: int = 8, tv_weight: float = 10.0, clamp: bool = True,
                 start: float = 0.0, start_step: Optional[int] = None, stop_step: Optional[int] = None) -> None:
        super().__init__(n_views, lr, lr_final, weight_decay, start, start_step, stop_step)
        if grid < 1 or bins < 1 or tv_weight < 0:
            raise ConfigError(f"appearance bilateral: grid ({grid}) and bins ({bins}) must be >= 1, "
                              f"tv_weight ({tv_weight}) >= 0")
        self.tv_weight = tv_weight
        self.clamp = clamp
        self.delta = torch.nn.Parameter(torch.zeros(n_views, 12, bins, grid, grid))  # [A - I | b] per cell

    def apply(self, rgb: Tensor, view_ids: Tensor) -> Tensor:
        """The renders [C,H,W,3] of training views ``view_ids`` [C] in their own appearance."""
        C, H, W, _ = rgb.shape
        cells = self.delta[view_ids.to(self.delta.device)].to(rgb.dtype)  # [C,12,L,G,G]
        ys = torch.linspace(-1.0, 1.0, H, device=rgb.device, dtype=rgb.dtype)
        xs = torch.linspace(-1.0, 1.0, W, device=rgb.device, dtype=rgb.dtype)
        luma = rgb @ torch.tensor(LUMA, device=rgb.device, dtype=rgb.dtype) * 2.0 - 1.0  # [C,H,W]
        where = torch.stack([xs.expand(C, H, W), ys[:, None].expand(C, H, W), luma], dim=-1)  # (x, y, z)
        coeffs = F.grid_sample(cells, where[:, None], mode="bilinear", padding_mode="border", align_corners=True)
        coeffs = coeffs[:, :, 0].permute(0, 2, 3, 1).reshape(C, H, W, 3, 4)
        out = rgb + torch.einsum("chwij,chwj->chwi", coeffs[..., :3], rgb) + coeffs[..., 3]
        return out.clamp(0.0, 1.0) if self.clamp else out

    def regularization(self, view_ids: Tensor) -> Optional[Tensor]:
        """``tv_weight`` x the mean squared difference of neighbouring cells of the views' grids."""
        if self.tv_weight == 0:
            return None
        cells = self.delta[view_ids.to(self.delta.device)]
        tv = sum((torch.diff(cells, dim=axis) ** 2).mean() for axis in (2, 3, 4) if cells.shape[axis] > 1)
        return self.tv_weight * tv if isinstance(tv, Tensor) else None

    def report(self) -> Dict[str, float]:
        """Largest departure of any cell's map from identity."""
        with torch.no_grad():
            return {"appearance_cell_max_abs": float(self.delta.abs().max())}
