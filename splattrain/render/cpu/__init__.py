"""The compiled CPU rasterizer (and the loss's SSIM): C++ built on first use, loaded with ctypes
(see ``build``)."""

from .build import BuildError, Library, load_library
from .rasterizer import composite, intersect_tiles, project, rasterize, sh_colors

__all__ = [
    "BuildError", "Library", "composite", "intersect_tiles", "load_library", "project", "rasterize", "sh_colors",
]
