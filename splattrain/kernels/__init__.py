"""splattrain's compiled CPU kernels: rasterization stages, SSIM, Adam, densification statistics
and MCMC's position noise in C++, built on first use and loaded with ctypes (see ``build``). The
packages above (render, losses, optim, strategy) wrap them; this package imports nothing of theirs."""

from .build import BuildError, Library, load_library, loaded_library

__all__ = ["BuildError", "Library", "load_library", "loaded_library"]
