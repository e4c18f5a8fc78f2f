"""Validation metrics (LPIPS: test_lpips.py)."""

from __future__ import annotations

import math

import pytest
import torch

from splattrain.metrics import psnr


def test_psnr_closed_form():
    a = torch.zeros(1, 4, 4, 3)
    b = torch.full((1, 4, 4, 3), 0.1)
    assert psnr(a, b) == pytest.approx(-10 * math.log10(0.01), rel=1e-5)
