"""SSIM as the loss and the metrics compute it (pytorch_msssim's definition)."""

from __future__ import annotations

from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from pytorch_msssim import ssim
from torch import Tensor

from ..kernels.ssim import compiled_ssim, compiled_ssim_applies

_SSIM_WINDOW, _SSIM_SIGMA, _SSIM_K = 11, 1.5, (0.01, 0.03)


def ssim_nhwc(pred: Tensor, target: Tensor) -> Tensor:
    """Mean SSIM of [C,H,W,3] images in [0,1] (11x11 Gaussian window, sigma 1.5), as
    pytorch_msssim computes it, or on the CPU the compiled library's fused kernel with the same
    definition once this process has loaded the library."""
    if compiled_ssim_applies(pred, target):
        return compiled_ssim(pred, target)
    x, y = pred.permute(0, 3, 1, 2), target.permute(0, 3, 1, 2)
    return ssim(x, y, data_range=1.0, size_average=True, win=_window(x.shape[1], x.device))


_WINDOWS: Dict[Tuple[int, torch.device], Tensor] = {}


def _window(channels: int, device: torch.device) -> Tensor:
    """pytorch_msssim's Gaussian window [channels, 1, 1, 11], made on ``device`` once (pytorch_msssim
    would build it on the CPU and copy it to the device at every call)."""
    key = (channels, device)
    if key not in _WINDOWS:
        coords = torch.arange(_SSIM_WINDOW, dtype=torch.float32, device=device) - _SSIM_WINDOW // 2
        g = torch.exp(-(coords**2) / (2 * _SSIM_SIGMA**2))
        _WINDOWS[key] = (g / g.sum()).reshape(1, 1, 1, -1).repeat(channels, 1, 1, 1)
    return _WINDOWS[key]


def ssim_map(pred: Tensor, target: Tensor) -> Tensor:
    """Per-pixel SSIM [C,H-10,W-10,3] of [C,H,W,3] images in [0,1]; its mean is :func:`ssim_nhwc`.

    A side shorter than the 11-pixel window is not blurred (nor shortened), as in pytorch_msssim.
    """
    x, y = pred.permute(0, 3, 1, 2), target.permute(0, 3, 1, 2)
    coords = torch.arange(_SSIM_WINDOW, dtype=x.dtype, device=x.device) - _SSIM_WINDOW // 2
    window = torch.exp(-(coords**2) / (2 * _SSIM_SIGMA**2))
    window = (window / window.sum()).repeat(x.shape[1], 1, 1, 1)

    def blur(t: Tensor) -> Tensor:  # like pytorch_msssim, no blur along a side shorter than the window
        if t.shape[3] >= _SSIM_WINDOW:
            t = F.conv2d(t, window, groups=t.shape[1])
        if t.shape[2] >= _SSIM_WINDOW:
            t = F.conv2d(t, window.transpose(2, 3), groups=t.shape[1])
        return t

    c1, c2 = _SSIM_K[0] ** 2, _SSIM_K[1] ** 2
    mu_x, mu_y = blur(x), blur(y)
    var_x = blur(x * x) - mu_x**2
    var_y = blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    out = ((2 * mu_x * mu_y + c1) / (mu_x**2 + mu_y**2 + c1)) * ((2 * cov + c2) / (var_x + var_y + c2))
    return out.permute(0, 2, 3, 1)


def masked_ssim(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Mean SSIM over the windows centred on pixels where ``mask`` [C,H,W,1] is True."""
    rh, rw = (_SSIM_WINDOW // 2 if side >= _SSIM_WINDOW else 0 for side in mask.shape[1:3])
    centres = mask[:, rh : mask.shape[1] - rh, rw : mask.shape[2] - rw].to(pred.dtype)
    weights = centres.expand(-1, -1, -1, pred.shape[-1])
    return (ssim_map(pred, target) * weights).sum() / weights.sum().clamp_min(1e-8)
