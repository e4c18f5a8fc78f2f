"""LPIPS (Zhang et al. 2018, version 0.1) with torch alone: no torchvision, no lpips import.

The network is small: the ReLU outputs of AlexNet's or VGG16's convolutional features,
each unit-normalised over channels, squared differences weighted by learned 1x1 linear
layers, averaged over space and summed over layers. The backbone weights are read from
torchvision's state-dict file (``features.*`` keys) and the linear layers from the LPIPS
v0.1 weight files (``lin{k}.model.1.weight``), both with ``weights_only=True``; where those
files come from is :mod:`splattrain.metrics.lpips_files`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: The lpips package's input scaling: x in [-1, 1] becomes (x - SHIFT) / SCALE per channel.
SHIFT = (-0.030, -0.088, -0.188)
SCALE = (0.458, 0.448, 0.450)


@dataclass(frozen=True)
class Backbone:
    """One backbone: its feature layers in torchvision's layout, cut where LPIPS taps them.

    ``layers`` lists ``("conv", index, in, out, kernel, stride, padding)``, ``("relu",)`` and
    ``("pool",)`` in torchvision's ``features`` order; ``taps`` are the indices after which a
    feature map is taken (the ReLU outputs the lpips package slices at).
    """

    layers: Tuple[tuple, ...]
    taps: Tuple[int, ...]

    @property
    def channels(self) -> List[int]:
        """Channels of each tapped feature map (the linear layers' inputs)."""
        out, channels = 3, []
        for index, layer in enumerate(self.layers):
            if layer[0] == "conv":
                out = layer[3]
            if index in self.taps:
                channels.append(out)
        return channels


def _vgg16_layers() -> Tuple[tuple, ...]:
    layers: list = []
    cin = 3
    for width in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512):
        if width == "M":
            layers.append(("pool", 2, 2))
        else:
            layers += [("conv", len(layers), cin, width, 3, 1, 1), ("relu",)]
            cin = width
    return tuple(layers)


BACKBONES: Dict[str, Backbone] = {
    "alex": Backbone(
        (
            ("conv", 0, 3, 64, 11, 4, 2), ("relu",), ("pool", 3, 2),
            ("conv", 3, 64, 192, 5, 1, 2), ("relu",), ("pool", 3, 2),
            ("conv", 6, 192, 384, 3, 1, 1), ("relu",),
            ("conv", 8, 384, 256, 3, 1, 1), ("relu",),
            ("conv", 10, 256, 256, 3, 1, 1), ("relu",),
        ),
        (1, 4, 7, 9, 11),
    ),
    "vgg": Backbone(_vgg16_layers(), (3, 8, 15, 22, 29)),
}


class LPIPSNet(nn.Module):
    """LPIPS v0.1 for one backbone; ``forward(x, y)`` takes [N, 3, H, W] images in [-1, 1]."""

    def __init__(self, net: str = "alex") -> None:
        super().__init__()
        self.backbone = BACKBONES[net]
        self.convs = nn.ModuleDict()
        for layer in self.backbone.layers:
            if layer[0] == "conv":
                _, index, cin, cout, kernel, stride, padding = layer
                self.convs[str(index)] = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding)
        self.lins = nn.ModuleList(nn.Conv2d(c, 1, 1, bias=False) for c in self.backbone.channels)
        self.register_buffer("shift", torch.tensor(SHIFT).view(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor(SCALE).view(1, 3, 1, 1))
        self.requires_grad_(False)

    def features(self, x: Tensor) -> List[Tensor]:
        """The tapped feature maps of scaled input ``x``."""
        taps = []
        for index, layer in enumerate(self.backbone.layers):
            if layer[0] == "conv":
                x = self.convs[str(layer[1])](x)
            elif layer[0] == "relu":
                x = F.relu(x)
            else:
                x = F.max_pool2d(x, kernel_size=layer[1], stride=layer[2])
            if index in self.backbone.taps:
                taps.append(x)
        return taps

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Per-image LPIPS [N] of images in [-1, 1]."""
        fx = self.features((x - self.shift) / self.scale)
        fy = self.features((y - self.shift) / self.scale)
        total = x.new_zeros(x.shape[0])
        for a, b, lin in zip(fx, fy, self.lins):
            a = a / (a.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10)
            b = b / (b.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10)
            total = total + lin((a - b) ** 2).mean(dim=(1, 2, 3))
        return total

    def load_backbone(self, state: Dict[str, Tensor]) -> None:
        """Load a torchvision state dict (``features.<i>.weight`` / ``.bias``; other keys ignored)."""
        for index, conv in self.convs.items():
            conv.weight.copy_(state[f"features.{index}.weight"])
            conv.bias.copy_(state[f"features.{index}.bias"])

    def load_linear(self, state: Dict[str, Tensor]) -> None:
        """Load the lpips package's linear layers (``lin<k>.model.1.weight``, shape [1, C, 1, 1])."""
        for k, lin in enumerate(self.lins):
            lin.weight.copy_(state[f"lin{k}.model.1.weight"])


def load_lpips(net: str, backbone: Path, linear: Path) -> Tuple[Optional[LPIPSNet], str]:
    """(the network with the weights of the two files, "") or (None, why they do not fit it)."""
    model = LPIPSNet(net)
    try:
        model.load_backbone(torch.load(backbone, map_location="cpu", weights_only=True))
        model.load_linear(torch.load(linear, map_location="cpu", weights_only=True))
    except Exception as err:  # a wrong or damaged file: any loading error means the same to the user
        return None, f"LPIPS weights {backbone} / {linear} do not fit the {net} network ({type(err).__name__}: {err})"
    return model.eval(), ""
