"""Image quality metrics for validation: PSNR, colour-corrected PSNR, SSIM and (where available) LPIPS."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor

from ..download import Progress
from ..errors import ConfigError
from ..losses import masked_ssim, ssim_nhwc
from .lpips_files import build_lpips


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
    """LPIPS computed by splattrain's own network (torch only) once its two weight files are found,
    or (with ``download``) fetched and verified (:mod:`splattrain.metrics.lpips_files`).

    When they cannot be had, ``available`` is False and ``reason`` says why in one line, naming
    the files and where they go.
    """

    def __init__(self, net: str = "alex", device: torch.device | str = "cpu", weights: Optional[str] = None,
                 download: bool = False, progress: Optional[Progress] = None) -> None:
        model, self.reason = build_lpips(net, weights, download=download, progress=progress)
        self.model: Optional[torch.nn.Module] = model.to(device) if model is not None else None

    @property
    def available(self) -> bool:
        return self.model is not None

    @torch.no_grad()
    def __call__(self, pred: Tensor, target: Tensor) -> Optional[float]:
        """Mean LPIPS of [C,H,W,3] images in [0,1], or None when unavailable."""
        if self.model is None:
            return None
        x = pred.clamp(0, 1).permute(0, 3, 1, 2) * 2 - 1
        y = target.clamp(0, 1).permute(0, 3, 1, 2) * 2 - 1
        return float(self.model(x, y).mean())


class Evaluator:
    """Scores rendered views against ground truth; warns once when LPIPS is unavailable.

    ``lpips_download`` fetches missing LPIPS weight files into torch's hub cache (``progress``
    shows the transfer, e.g. ``Console.transfer``). ``required``: ``(who, metric)`` pairs checked
    by :meth:`require` before anything is warned about.
    """

    def __init__(
        self, lpips: bool, lpips_net: str, device: torch.device, warn: Callable[[str], None],
        lpips_weights: Optional[str] = None, lpips_download: bool = False, progress: Optional[Progress] = None,
        required: Iterable[Tuple[str, str]] = (),
    ) -> None:
        self.lpips = LPIPSMetric(lpips_net, device, lpips_weights, lpips_download, progress) if lpips else None
        self.require(required)
        if self.lpips is not None and not self.lpips.available:
            warn(f"LPIPS disabled, reported as null: {self.lpips.reason}")

    def unavailable(self, metric: str) -> Optional[str]:
        """Why ``metric`` can never be computed in this run (None when it is, or is not one of ours)."""
        if metric != "lpips":
            return None
        if self.lpips is None:
            return "metrics.lpips is false"
        return None if self.lpips.available else self.lpips.reason

    def require(self, needs: Iterable[Tuple[str, str]]) -> None:
        """Refuse (ConfigError, one line) when a ``(who, metric)`` in ``needs`` names a metric this
        evaluator can never compute."""
        for who, metric in needs:
            why = self.unavailable(metric)
            if why is not None:
                raise ConfigError(f"{who} needs the validation metric {metric!r}, which this run cannot compute: {why}")

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
    """Mean psnr / cc_psnr / ssim / lpips over views (None where a metric is unavailable), and
    aligned_psnr where the views have it."""
    out: Dict[str, Optional[float]] = {}
    aligned = ("aligned_psnr",) if any("aligned_psnr" in v for v in per_view) else ()
    for key in ("psnr", "cc_psnr", "ssim", "lpips", *aligned):
        values = [v[key] for v in per_view if v.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out
