"""Validation metrics and the LPIPS fallback."""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from splattrain.metrics import Evaluator, LPIPSMetric, psnr


def test_psnr_closed_form():
    a = torch.zeros(1, 4, 4, 3)
    b = torch.full((1, 4, 4, 3), 0.1)
    assert psnr(a, b) == pytest.approx(-10 * math.log10(0.01), rel=1e-5)


def test_evaluator_without_lpips_package_warns_once_and_reports_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "lpips", None)  # import lpips -> ImportError
    warnings = []
    evaluator = Evaluator(True, "alex", torch.device("cpu"), warnings.append)
    img = torch.rand(1, 16, 16, 3, generator=torch.Generator().manual_seed(0))
    scores = [evaluator(img, img.flip(1)) for _ in range(3)]
    assert len(warnings) == 1 and "LPIPS disabled" in warnings[0] and "lpips" in warnings[0]
    assert all(s["lpips"] is None for s in scores)
    assert scores[0]["ssim"] < 1.0 and math.isfinite(scores[0]["psnr"])
    same = evaluator(img, img)
    assert same["ssim"] == pytest.approx(1.0, abs=1e-5) and same["psnr"] > 100


def test_lpips_missing_weights_never_downloads(monkeypatch, tmp_path):
    built = []
    fake = types.ModuleType("lpips")
    fake.LPIPS = lambda **kwargs: built.append(kwargs)
    monkeypatch.setitem(sys.modules, "lpips", fake)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    metric = LPIPSMetric("alex")
    assert not metric.available and built == []
    assert "alexnet-owt-7be5be79.pth" in metric.reason and "does not download" in metric.reason
    assert metric(torch.zeros(1, 8, 8, 3), torch.zeros(1, 8, 8, 3)) is None


def test_lpips_used_when_weights_present(monkeypatch, tmp_path):
    class FakeNet(torch.nn.Module):
        def forward(self, x, y, normalize=False):
            assert normalize and x.shape == (1, 3, 8, 8)
            return (x - y).abs().mean(dim=(1, 2, 3), keepdim=True)

    fake = types.ModuleType("lpips")
    fake.LPIPS = lambda **kwargs: FakeNet()
    monkeypatch.setitem(sys.modules, "lpips", fake)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "alexnet-owt-7be5be79.pth").write_bytes(b"")
    metric = LPIPSMetric("alex")
    assert metric.available
    assert metric(torch.zeros(1, 8, 8, 3), torch.full((1, 8, 8, 3), 0.5)) == pytest.approx(0.5)
