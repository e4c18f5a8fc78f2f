"""Compare splattrain's LPIPS with the lpips package's own network, same random weights.

Run where the lpips package imports (it needs a torchvision matching torch):

    python tests/lpips_package_check.py

It prints the largest relative difference per backbone and exits 1 above 1e-4. It is a
script, not a test, because the package cannot be imported on machines without a matching
torchvision (CI included); tests/test_lpips.py checks against a hand-written reference there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lpips_weights import backbone_state, linear_state  # noqa: E402

from splattrain.metrics.lpips_net import LPIPSNet  # noqa: E402


def package_model(net: str):
    import lpips

    model = lpips.LPIPS(net=net, pretrained=False, pnet_rand=True, verbose=False).eval()
    backbone = backbone_state(net)
    with torch.no_grad():
        for name, module in model.net.named_modules():
            if isinstance(module, torch.nn.Conv2d):
                index = name.split(".")[-1]  # slices keep torchvision's feature indices
                module.weight.copy_(backbone[f"features.{index}.weight"])
                module.bias.copy_(backbone[f"features.{index}.bias"])
        for key, value in linear_state(net).items():
            dict(model.named_parameters())[key].copy_(value)
    return model


def main() -> int:
    worst = 0.0
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 64, 64, generator=g)
    y = (x + 0.2 * torch.randn(2, 3, 64, 64, generator=g)).clamp(0, 1)
    for net in ("alex", "vgg"):
        ours = LPIPSNet(net)
        ours.load_backbone(backbone_state(net))
        ours.load_linear(linear_state(net))
        with torch.no_grad():
            a = ours(x * 2 - 1, y * 2 - 1)
            b = package_model(net)(x, y, normalize=True).flatten()
        diff = float(((a - b).abs() / b.abs()).max())
        worst = max(worst, diff)
        print(f"{net}: splattrain {a.tolist()} lpips {b.tolist()} max relative difference {diff:.2e}")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
