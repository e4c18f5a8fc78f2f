"""Renderer backends behind one interface: gsplat (CUDA) and the PyTorch rasterizer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, List, Optional

import torch
from torch import Tensor

from ..cameras import Camera, stack_cameras
from ..errors import ConfigError
from ..model.gaussians import GaussianModel
from ..registry import RENDERERS
from .base import RenderResult


class Renderer(ABC):
    """Renders a GaussianModel from a batch of same-sized cameras.

    Subclasses implement ``render``; every backend returns the same RenderResult, with
    a gsplat-shaped ``info`` dict so gsplat's densification strategies work unchanged.
    Backends with ``supports_absgrad`` fill ``info["means2d"].absgrad`` when ``absgrad`` is set.
    """

    supports_absgrad = False

    def __init__(
        self,
        rasterize_mode: str = "classic",
        tile_size: int = 16,
        near_plane: float = 0.01,
        far_plane: float = 1e10,
        eps2d: float = 0.3,
    ) -> None:
        self.rasterize_mode = rasterize_mode
        self.tile_size = tile_size
        self.near_plane = near_plane
        self.far_plane = far_plane
        self.eps2d = eps2d
        self.absgrad = False

    @abstractmethod
    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: bool = True
    ) -> RenderResult:
        """Render ``model`` from ``cameras`` using SH up to ``sh_degree`` over ``background`` [3];
        ``depth`` False leaves ``RenderResult.depth`` None and skips its work (training steps)."""


def sh_colors(model: GaussianModel, viewmats: Tensor, sh_degree: int) -> Tensor:
    """View-dependent RGB per camera [C, N, 3], as gsplat computes it (SH + 0.5, clamped at 0)."""
    from gsplat.cuda._torch_impl import _spherical_harmonics

    rot = viewmats[:, :3, :3]
    campos = -torch.einsum("cji,cj->ci", rot, viewmats[:, :3, 3])  # [C, 3]
    dirs = model.means[None, :, :] - campos[:, None, :]  # [C, N, 3]
    coeffs = model.sh_coeffs[None].expand(viewmats.shape[0], -1, -1, -1)
    colors = _spherical_harmonics(sh_degree, dirs, coeffs[:, :, : (sh_degree + 1) ** 2, :])
    return torch.clamp_min(colors + 0.5, 0.0)


@RENDERERS.register("torch", aliases=("TorchRenderer",))
class TorchRenderer(Renderer):
    """Pure PyTorch tile rasterizer: runs on any device, the reference for other backends."""

    supports_absgrad = True

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: bool = True
    ) -> RenderResult:
        from .torch_rasterizer import rasterize

        viewmats, Ks, width, height = stack_cameras(cameras)
        C = viewmats.shape[0]
        features = sh_colors(model, viewmats, sh_degree)  # [C, N, 3], then depth as a 4th channel
        backgrounds = background.expand(C, 3)
        if depth:
            depths = (torch.einsum("cij,nj->cni", viewmats[:, :3, :3], model.means) + viewmats[:, None, :3, 3])[..., 2:]
            features = torch.cat([features, depths], dim=-1)
            backgrounds = torch.cat([backgrounds, background.new_zeros(C, 1)], dim=-1)
        render, alpha, info = rasterize(
            model.means,
            model.quats,
            model.scales,
            model.opacities,
            features,
            viewmats,
            Ks,
            width,
            height,
            near_plane=self.near_plane,
            far_plane=self.far_plane,
            eps2d=self.eps2d,
            tile_size=self.tile_size,
            rasterize_mode=self.rasterize_mode,
            backgrounds=backgrounds,
            absgrad=self.absgrad,
        )
        expected_depth = render[..., 3:] / alpha.clamp_min(1e-10) if depth else None
        return RenderResult(rgb=render[..., :3], alpha=alpha, depth=expected_depth, info=info)


@RENDERERS.register("gsplat", aliases=("GsplatRenderer",))
class GsplatRenderer(Renderer):
    """gsplat's CUDA rasterizer (needs a CUDA device)."""

    supports_absgrad = True

    def render(
        self, model: GaussianModel, cameras: List[Camera], sh_degree: int, background: Tensor, depth: bool = True
    ) -> RenderResult:
        from gsplat import rasterization

        viewmats, Ks, width, height = stack_cameras(cameras)
        C = viewmats.shape[0]
        render, alpha, info = rasterization(
            model.means,
            model.quats,
            model.scales,
            model.opacities,
            model.sh_coeffs,
            viewmats,
            Ks,
            width,
            height,
            near_plane=self.near_plane,
            far_plane=self.far_plane,
            eps2d=self.eps2d,
            tile_size=self.tile_size,
            sh_degree=sh_degree,
            backgrounds=background.expand(C, 3),
            render_mode="RGB+ED" if depth else "RGB",
            rasterize_mode=self.rasterize_mode,
            packed=False,
            absgrad=self.absgrad,
        )
        return RenderResult(rgb=render[..., :3], alpha=alpha, depth=render[..., 3:] if depth else None, info=info)


def build_renderer(
    spec: dict, device: torch.device, log: Optional[Callable[[str], None]] = None,
    warn: Optional[Callable[[str], None]] = None, absgrad: bool = False,
) -> Renderer:
    """Build the renderer named by ``spec['type']`` and set its ``absgrad``. ``auto`` picks gsplat
    on CUDA, else the compiled CPU backend, or torch when that cannot be built (after one
    ``warn``) or when ``absgrad`` is asked for (the compiled backend does not compute it);
    ``log`` hears about the CPU backend's first-use compile and about that choice."""
    spec = dict(spec)
    kind = spec.get("type", "auto")
    if kind == "auto" and device.type != "cuda" and absgrad:
        spec["type"] = "torch"
        if log is not None:
            log("renderer auto: using the PyTorch renderer, which computes the absolute gradients strategy.absgrad needs")
    elif kind == "auto":
        spec["type"] = "gsplat" if device.type == "cuda" else cpu_renderer.auto_cpu_backend(device, log, warn)
    elif kind == "gsplat" and device.type != "cuda":
        raise ConfigError(f"renderer.type 'gsplat' needs a CUDA device, but the run uses '{device}'; use 'auto' or 'torch'")
    elif kind == "cpu":
        cpu_renderer.require_cpu_backend(device, log)
    renderer = RENDERERS.build(spec)
    renderer.absgrad = absgrad
    return renderer


from . import cpu_renderer  # noqa: E402  (registers "cpu"; imports Renderer from here)
