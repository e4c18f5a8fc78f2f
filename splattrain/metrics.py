"""Image quality metrics for validation: PSNR, colour-corrected PSNR, SSIM and (where available) LPIPS."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor

from .losses.ssim import masked_ssim, ssim_nhwc

#: torchvision checkpoint file each LPIPS backbone needs in torch's hub cache.
LPIPS_BACKBONE_FILES = {
    "alex": "alexnet-owt-7be5be79.pth",
    "vgg": "vgg16-397923af.pth",
    "squeeze": "squeezenet1_1-b8a52dc0.pth",
}


def psnr(pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> float:
    """Peak signal-to-noise ratio in dB of images in [0, 1] (over pixels where ``mask`` [C,H,W,1] is True)."""
    error = (pred.clamp(0, 1) - target) ** 2
    if mask is None:
        mse = torch.mean(error)
    else:
        mse = (error * mask).sum() / (mask.sum() * error.shape[-1]).clamp_min(1)
    return float(-10.0 * torch.log10(mse.clamp_min(1e-12)))


def color_correct(pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """``pred`` [C,H,W,3] mapped per image by the affine colour transform (3x3 matrix plus offset)
    that best fits ``target`` in least squares (over ``mask``'s pixels), clamped to [0, 1].

    Scores taken after it ignore a view's global exposure and white balance: what a model with
    learned per-image appearance cannot know for a held-out view."""
    out = []
    for k in range(pred.shape[0]):
        x = pred[k].reshape(-1, 3).double()
        y = target[k].reshape(-1, 3).double()
        rows = mask[k].reshape(-1) if mask is not None else torch.ones(len(x), dtype=torch.bool, device=x.device)
        features = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
        solution = torch.linalg.lstsq(features[rows].cpu(), y[rows].cpu()).solution.to(x.device)
        out.append((features @ solution).reshape(pred[k].shape).to(pred.dtype))
    return torch.stack(out).clamp(0, 1)


class LPIPSMetric:
    """LPIPS through the ``lpips`` package, only when it imports and its weights are on disk.

    It never downloads anything: when the package or the backbone weights are missing,
    ``available`` is False and ``reason`` says why.
    """

    def __init__(self, net: str = "alex", device: torch.device | str = "cpu") -> None:
        self.model: Optional[torch.nn.Module] = None
        self.reason = ""
        if net not in LPIPS_BACKBONE_FILES:
            self.reason = f"unknown LPIPS network {net!r} (use one of {', '.join(LPIPS_BACKBONE_FILES)})"
            return
        try:
            import lpips
        except Exception as err:  # lpips pulls torchvision, which may fail to import for many reasons
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            self.reason = (
                f"the lpips package cannot be imported ({detail}); "
                "install splattrain[lpips] with a torchvision that matches your torch"
            )
            return
        weights = Path(torch.hub.get_dir()) / "checkpoints" / LPIPS_BACKBONE_FILES[net]
        if not weights.is_file():
            self.reason = (
                f"LPIPS backbone weights not found at {weights}; splattrain does not download them. "
                f"Fetch them once with: python -c \"import lpips; lpips.LPIPS(net='{net}')\""
            )
            return
        try:
            self.model = lpips.LPIPS(net=net, verbose=False).to(device).eval()
        except Exception as err:
            self.reason = f"LPIPS could not be built ({type(err).__name__}: {err})"

    @property
    def available(self) -> bool:
        return self.model is not None

    @torch.no_grad()
    def __call__(self, pred: Tensor, target: Tensor) -> Optional[float]:
        """LPIPS of [C,H,W,3] images in [0,1], or None when unavailable."""
        if self.model is None:
            return None
        x = pred.clamp(0, 1).permute(0, 3, 1, 2)
        y = target.permute(0, 3, 1, 2)
        return float(self.model(x, y, normalize=True).mean())


class Evaluator:
    """Scores rendered views against ground truth; warns once when LPIPS is unavailable."""

    def __init__(self, lpips: bool, lpips_net: str, device: torch.device, warn: Callable[[str], None]) -> None:
        self.lpips = LPIPSMetric(lpips_net, device) if lpips else None
        if self.lpips is not None and not self.lpips.available:
            warn(f"LPIPS disabled, reported as null: {self.lpips.reason}")

    @torch.no_grad()
    def __call__(self, pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Dict[str, Optional[float]]:
        """{'psnr', 'cc_psnr', 'ssim', 'lpips'} for [C,H,W,3] images (lpips None when unavailable;
        ``cc_psnr``: PSNR after :func:`color_correct`).

        With ``mask`` (bool [C,H,W,1]) PSNR and SSIM average over its True pixels only; LPIPS
        sees the prediction with the masked-out pixels replaced by the target's.
        """
        if mask is not None:
            pred = torch.where(mask, pred.clamp(0, 1), target)
            return {
                "psnr": psnr(pred, target, mask),
                "cc_psnr": psnr(color_correct(pred, target, mask), target, mask),
                "ssim": float(masked_ssim(pred, target, mask)),
                "lpips": self.lpips(pred, target) if self.lpips is not None else None,
            }
        return {
            "psnr": psnr(pred, target),
            "cc_psnr": psnr(color_correct(pred, target), target),
            "ssim": float(ssim_nhwc(pred.clamp(0, 1), target)),
            "lpips": self.lpips(pred, target) if self.lpips is not None else None,
        }


def mean_metrics(per_view: List[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    """Mean psnr / cc_psnr / ssim / lpips over views (None where a metric is unavailable)."""
    out: Dict[str, Optional[float]] = {}
    for key in ("psnr", "cc_psnr", "ssim", "lpips"):
        values = [v[key] for v in per_view if v.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out
