"""The compiled CPU backend (``renderer.type: cpu``), and what ``auto`` picks on the CPU."""

from __future__ import annotations

from typing import Callable, List, Optional

import torch
from torch import Tensor

from ..cameras import Camera, stack_cameras
from ..errors import ConfigError
from ..model.gaussians import GaussianModel
from ..registry import RENDERERS
from .base import Renderer, RenderResult
from .cpu import BuildError, composite, load_library, project, sh_colors

Message = Optional[Callable[[str], None]]


@RENDERERS.register("cpu", aliases=("CpuRenderer",))
class CpuRenderer(Renderer):
    """Compiled C++ rasterizer for the CPU, all cores (built on first use; needs a C++ compiler)."""

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: bool = True
    ) -> RenderResult:
        viewmats, Ks, width, height = stack_cameras(cameras)
        C = viewmats.shape[0]
        features = sh_colors(model.means, model.params["sh0"], model.params["shN"], viewmats, sh_degree)
        proj = project(
            model.means, model.quats, model.scales, model.opacities, viewmats, Ks, width, height,
            near_plane=self.near_plane, far_plane=self.far_plane, eps2d=self.eps2d,
            antialiased=self.rasterize_mode == "antialiased",
        )
        backgrounds = background.expand(C, 3)
        if depth:  # depth as a 4th channel
            features = torch.cat([features, proj.depths[..., None]], dim=-1)
            backgrounds = torch.cat([backgrounds, background.new_zeros(C, 1)], dim=-1)
        render, alpha, info = composite(
            proj, features, width, height, tile_size=self.tile_size, backgrounds=backgrounds
        )
        expected_depth = render[..., 3:] / alpha.clamp_min(1e-10) if depth else None
        return RenderResult(rgb=render[..., :3], alpha=alpha, depth=expected_depth, info=info)


def auto_cpu_backend(device: torch.device, log: Message = None, warn: Message = None) -> str:
    """What ``renderer.type: auto`` means off CUDA: ``cpu`` when the compiled rasterizer builds
    (``log`` hears about a first-use compile), else ``torch`` after one ``warn`` naming why."""
    if device.type != "cpu":
        return "torch"
    try:
        load_library(log)
    except BuildError as error:
        if warn is not None:
            warn(f"using the slower PyTorch renderer: the compiled CPU rasterizer is unavailable ({error})")
        return "torch"
    return "cpu"


def require_cpu_backend(device: torch.device, log: Message = None) -> None:
    """Build (or load) the compiled rasterizer for ``renderer.type: cpu``; ConfigError if it cannot."""
    if device.type != "cpu":
        raise ConfigError(f"renderer.type 'cpu' runs on the CPU, but the run uses '{device}'; use 'auto'")
    try:
        load_library(log)
    except BuildError as error:
        raise ConfigError(f"renderer.type 'cpu' is unavailable: {error}; use 'torch' or 'auto'") from None
