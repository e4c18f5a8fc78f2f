"""Training losses."""

from __future__ import annotations

from typing import Dict

from pytorch_msssim import ssim
from torch import Tensor


def ssim_nhwc(pred: Tensor, target: Tensor) -> Tensor:
    """Mean SSIM of [C,H,W,3] images in [0,1] (11x11 Gaussian window, sigma 1.5)."""
    return ssim(pred.permute(0, 3, 1, 2), target.permute(0, 3, 1, 2), data_range=1.0, size_average=True)


def photometric_loss(pred: Tensor, target: Tensor, ssim_lambda: float = 0.2) -> Dict[str, Tensor]:
    """(1 - lambda) * L1 + lambda * (1 - SSIM), the 3DGS loss; returns every term and ``loss``."""
    l1 = (pred - target).abs().mean()
    dssim = 1.0 - ssim_nhwc(pred, target)
    return {"l1": l1, "dssim": dssim, "loss": (1.0 - ssim_lambda) * l1 + ssim_lambda * dssim}
