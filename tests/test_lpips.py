"""splattrain's own LPIPS network: layers, scaling, averaging, weight look-up (downloads:
tests/test_lpips_download.py)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from lpips_weights import FILES, LINEAR_CHANNELS, TORCHVISION_CONVS, backbone_state, linear_state, write_weights
from splattrain.metrics import lpips_files
from splattrain.metrics.lpips_files import build_lpips, lpips_package_weights_dir
from splattrain.metrics.lpips_net import LPIPSNet
from splattrain.metrics import Evaluator

#: Where each backbone's feature maps are taken: torchvision ``features`` index of the tapped ReLU.
TAPS = {"alex": [1, 4, 7, 9, 11], "vgg": [3, 8, 15, 22, 29]}
ALEX_GEOMETRY = {0: (4, 2), 3: (1, 2), 6: (1, 1), 8: (1, 1), 10: (1, 1)}  # index -> (stride, padding)
POOLS = {"alex": {2, 5}, "vgg": {4, 9, 16, 23}}


def reference_lpips(x01: torch.Tensor, y01: torch.Tensor, net: str) -> torch.Tensor:
    """LPIPS v0.1 written out with functional ops from the paper's description, [N,3,H,W] in [0, 1]."""
    backbone, linear = backbone_state(net), linear_state(net)
    shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)

    def features(img):
        h = ((img * 2 - 1) - shift) / scale
        out = []
        last = max(TAPS[net])
        for index in range(last + 1):
            if index in TORCHVISION_CONVS[net]:
                stride, pad = ALEX_GEOMETRY[index] if net == "alex" else (1, 1)
                h = F.conv2d(h, backbone[f"features.{index}.weight"], backbone[f"features.{index}.bias"], stride, pad)
            elif index in POOLS[net]:
                h = F.max_pool2d(h, 3, 2) if net == "alex" else F.max_pool2d(h, 2, 2)
            else:
                h = F.relu(h)
            if index in TAPS[net]:
                out.append(h)
        return out

    total = torch.zeros(x01.shape[0])
    for k, (a, b) in enumerate(zip(features(x01), features(y01))):
        a = a / (torch.sqrt((a**2).sum(1, keepdim=True)) + 1e-10)
        b = b / (torch.sqrt((b**2).sum(1, keepdim=True)) + 1e-10)
        weighted = ((a - b) ** 2 * linear[f"lin{k}.model.1.weight"]).sum(1)  # 1x1 conv, one output
        total += weighted.mean(dim=(1, 2))  # spatial average
    return total


def images(n=2, size=64, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, size, size, 3, generator=g)
    return x, (x + 0.2 * torch.randn(n, size, size, 3, generator=g)).clamp(0, 1)


@pytest.fixture
def no_package(monkeypatch, tmp_path):
    """No lpips package and an empty hub cache: only metrics.lpips_weights can supply files."""
    monkeypatch.setattr(lpips_files, "lpips_package_weights_dir", lambda: None)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_layer_shapes_and_channels(net):
    model = LPIPSNet(net)
    assert model.backbone.channels == LINEAR_CHANNELS[net]
    assert model.backbone.taps == tuple(TAPS[net])
    assert [tuple(lin.weight.shape) for lin in model.lins] == [(1, c, 1, 1) for c in LINEAR_CHANNELS[net]]
    for index, (cout, cin, k) in TORCHVISION_CONVS[net].items():
        assert tuple(model.convs[str(index)].weight.shape) == (cout, cin, k, k)
    feats = model.features(torch.zeros(1, 3, 64, 64))
    if net == "alex":
        assert [tuple(f.shape[1:]) for f in feats] == [(64, 15, 15), (192, 7, 7), (384, 3, 3), (256, 3, 3), (256, 3, 3)]
    else:
        assert [tuple(f.shape[1:]) for f in feats] == [(64, 64, 64), (128, 32, 32), (256, 16, 16), (512, 8, 8), (512, 4, 4)]


def test_input_scaling_constants():
    model = LPIPSNet("alex")
    assert torch.allclose(model.shift.flatten(), torch.tensor([-0.030, -0.088, -0.188]))
    assert torch.allclose(model.scale.flatten(), torch.tensor([0.458, 0.448, 0.450]))


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_matches_hand_written_reference(net, tmp_path, no_package):
    write_weights(tmp_path / "w", net)
    warnings = []
    evaluator = Evaluator(True, net, torch.device("cpu"), warnings.append, lpips_weights=str(tmp_path / "w"))
    assert warnings == []
    x, y = images(size=64 if net == "alex" else 32)
    got = evaluator(x, y)["lpips"]
    expected = reference_lpips(x.permute(0, 3, 1, 2), y.permute(0, 3, 1, 2), net).mean()
    assert got == pytest.approx(float(expected), rel=1e-4)
    assert got > 0 and evaluator(x, x)["lpips"] == pytest.approx(0.0, abs=1e-7)
    assert evaluator(y, x)["lpips"] == pytest.approx(got, rel=1e-5)  # symmetric


def test_spatial_average_is_a_plain_mean(tmp_path, no_package):
    """Each layer contributes the plain mean over its pixels of the weighted squared difference."""
    write_weights(tmp_path / "w")
    model, _ = build_lpips("alex", tmp_path / "w")
    x, y = images(n=1)
    a = x.permute(0, 3, 1, 2) * 2 - 1
    b = y.permute(0, 3, 1, 2) * 2 - 1
    fa, fb = model.features((a - model.shift) / model.scale), model.features((b - model.shift) / model.scale)
    per_layer = []
    for k, (u, v) in enumerate(zip(fa, fb)):
        u = u / (u.norm(dim=1, keepdim=True) + 1e-10)
        v = v / (v.norm(dim=1, keepdim=True) + 1e-10)
        per_pixel = model.lins[k]((u - v) ** 2)[0, 0]
        per_layer.append(per_pixel.sum() / per_pixel.numel())
    assert float(model(a, b)[0]) == pytest.approx(float(sum(per_layer)), rel=1e-5)


def test_missing_files_warn_once_naming_them(tmp_path, no_package):
    warnings = []
    evaluator = Evaluator(True, "alex", torch.device("cpu"), warnings.append)
    x, y = images(n=1, size=32)
    scores = [evaluator(x, y) for _ in range(3)]
    assert all(s["lpips"] is None for s in scores) and len(warnings) == 1
    assert "alexnet-owt-7be5be79.pth" in warnings[0] and "alex.pth" in warnings[0]
    assert str(tmp_path / "hub" / "checkpoints") in warnings[0] and str(tmp_path / "hub" / "checkpoints" / "lpips_v0.1") in warnings[0]
    assert "splattrain download-weights lpips" in warnings[0]
    write_weights(tmp_path / "half", backbone=True, linear=False)
    model, reason = build_lpips("alex", tmp_path / "half")
    assert model is None and "alex.pth" in reason and "alexnet-owt" not in reason.split(" and ")[0]


def test_wrong_files_are_reported_not_raised(tmp_path, no_package):
    folder = tmp_path / "w"
    write_weights(folder)
    torch.save(linear_state("vgg"), folder / "alex.pth")  # vgg's layers where alex's belong
    model, reason = build_lpips("alex", folder)
    assert model is None and "do not fit" in reason
    (folder / FILES["alex"]).write_bytes(b"not a checkpoint")
    assert build_lpips("alex", folder)[0] is None


def test_linear_layers_from_the_hub_cache_folder_of_their_own(tmp_path, no_package):
    """Downloaded linear layers live in <hub>/checkpoints/lpips_v0.1, apart from other tools' alex.pth."""
    hub = tmp_path / "hub" / "checkpoints"
    write_weights(hub, linear=False)
    torch.save(linear_state("vgg"), hub / "alex.pth")  # another tool's file of that name is not read
    write_weights(hub / "lpips_v0.1", backbone=False)
    model, reason = build_lpips("alex")
    assert model is not None, reason


def test_backbone_from_hub_cache_and_linear_layers_from_the_package_folder(tmp_path, monkeypatch):
    """The lpips package's shipped files are read from its folder; the package is never imported."""
    package = tmp_path / "site" / "lpips"
    (package / "weights" / "v0.1").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('the lpips package must not be imported')\n")
    torch.save(linear_state("alex"), package / "weights" / "v0.1" / "alex.pth")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "lpips", raising=False)
    hub = tmp_path / "hub"
    write_weights(hub / "checkpoints", linear=False)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    assert lpips_package_weights_dir() == package / "weights" / "v0.1"
    model, reason = build_lpips("alex")
    assert model is not None, reason
    assert "lpips" not in sys.modules
    x, y = images(n=1)
    expected = reference_lpips(x.permute(0, 3, 1, 2), y.permute(0, 3, 1, 2), "alex")
    got = model(x.permute(0, 3, 1, 2) * 2 - 1, y.permute(0, 3, 1, 2) * 2 - 1)
    assert torch.allclose(got, expected, rtol=1e-4)


def test_unknown_network_is_reported():
    model, reason = build_lpips("squeeze")
    assert model is None and "alex, vgg" in reason
