"""How much of the training images each Gaussian paints: its compositing weights summed over views.

A Gaussian's weight at a pixel is ``alpha_i T_i`` (its opacity there times the transmittance in
front of it): the share of the pixel's colour it supplies. Summed over every pixel of every view,
it is the importance score of LightGaussian and Mini-Splatting, and what a pruning schedule in the
spirit of Speedy-Splat removes the lowest of. Any renderer computes it: with every colour set to
0.5 over a black background, the gradient of the images' sum with respect to a Gaussian's DC
coefficient is ``C0`` times its weight sum per channel.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from ..cameras import Camera
from ..model.gaussians import SH_C0, GaussianModel
from .base import Renderer


def blending_weights(model: GaussianModel, renderer: Renderer, cameras: Iterable[Camera]) -> Tensor:
    """Per Gaussian [N], the sum over ``cameras`` (rendered one at a time) and their pixels of its
    compositing weight. The model is not changed. Learned pose and colour corrections and masks
    are not applied: colour does not change the weights, small pose changes change them little,
    and a Gaussian that paints only masked-out pixels counts as painting."""
    params = {name: value.detach() for name, value in model.params.items()}
    probe = GaussianModel({**params, "sh0": torch.zeros_like(params["sh0"])}, model.sh_degree)
    for name, value in probe.params.items():
        value.requires_grad_(name == "sh0")
    device = params["means"].device
    background = torch.zeros(3, device=device)
    with torch.enable_grad():
        for camera in cameras:
            result = renderer.render(probe, [camera.to(device)], 0, background, depth=False)
            result.rgb.sum().backward()
    grad = probe.params["sh0"].grad
    if grad is None:  # no camera, or no Gaussian seen
        return torch.zeros(model.num_gaussians, device=device)
    return grad.sum(dim=(1, 2)) / (3.0 * SH_C0)
