"""Validation metrics: PSNR, colour-corrected PSNR, SSIM and LPIPS per view (``scores``), the
LPIPS network on torch alone (``lpips_net``) and where its weight files come from
(``lpips_files``: found, or downloaded and checked)."""

from .scores import Evaluator, LPIPSMetric, color_correct, mean_metrics, psnr

__all__ = ["Evaluator", "LPIPSMetric", "color_correct", "mean_metrics", "psnr"]
