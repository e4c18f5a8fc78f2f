"""Renderers: the interface, the PyTorch reference, the compiled CPU backend and gsplat."""

from .base import RASTERIZE_MODES, Renderer, RenderResult, RenderScene
from .build import build_renderer, check_renderer_options
from .cpu_renderer import CpuRenderer
from .gsplat_renderer import GsplatRenderer
from .torch_renderer import TorchRenderer, sh_colors

__all__ = [
    "RASTERIZE_MODES", "CpuRenderer", "GsplatRenderer", "RenderResult", "RenderScene", "Renderer", "TorchRenderer",
    "build_renderer", "check_renderer_options", "sh_colors",
]
