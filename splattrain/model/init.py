"""The Gaussians a run starts from (``model.init``): the scene's sparse points, random points
around the cameras' focus, or the Gaussians of a scene file; and what starting costs in memory."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .gaussians import GaussianModel, num_sh_bases
from .neighbours import knn_memory_bytes

#: The renderer's per-Gaussian buffers at the backward pass's peak, in bytes (docs/benchmarks.md).
RENDER_BYTES_PER_GAUSSIAN = 256


def uses_points(init: Any, points: Optional[np.ndarray], scene: str) -> bool:
    """Whether ``model.init`` starts from the sparse points of ``scene`` (``points``; None: it has none)."""
    if init.type == "points" and points is None:
        raise ConfigError(f"model.init.type is 'points' but {scene} has no sparse points")
    return init.type == "points" or (init.type == "auto" and points is not None)


def start_memory_bytes(count: int, sh_degree: int) -> int:
    """What starting ``count`` Gaussians costs: parameters, gradients, Adam moments,
    densification's copies and the renderer's buffers, plus the neighbour search of the scales."""
    floats = 3 + 3 + 4 + 1 + 3 * num_sh_bases(sh_degree)
    return count * (floats * 4 * 7 + RENDER_BYTES_PER_GAUSSIAN) + knn_memory_bytes(count)


def from_points(init: Any, sh_degree: int, points: np.ndarray, colors: np.ndarray, seed: int) -> GaussianModel:
    """Gaussians on the sparse ``points`` (uint8 ``colors``), scaled by their neighbours' distances."""
    return GaussianModel.from_points(torch.from_numpy(points), torch.from_numpy(colors).float() / 255.0, sh_degree,
                                     opacity=init.opacity, scale_factor=init.scale_factor,
                                     generator=torch.Generator().manual_seed(seed))


def random_gaussians(init: Any, sh_degree: int, focus: Tensor, seed: int) -> GaussianModel:
    """``init.num_points`` Gaussians in a cube of half side ``init.extent`` around ``focus``."""
    return GaussianModel.random(init.num_points, focus, init.extent, sh_degree, opacity=init.opacity,
                                scale_factor=init.scale_factor, generator=torch.Generator().manual_seed(seed))


def from_file(init: Any, params: Dict[str, Tensor], degree: int, wanted: int) -> GaussianModel:
    """The Gaussians read from ``model.init.ply`` (of SH ``degree``), padded to SH degree ``wanted``."""
    if init.type != "auto":
        raise ConfigError(f"model.init.ply is set, so model.init.type must be 'auto', not {init.type!r}")
    if degree > wanted:
        raise ConfigError(f"model.init.ply '{init.ply}' has SH degree {degree}; set model.sh_degree={degree}")
    n = params["means"].shape[0]
    if n == 0:
        raise ConfigError(f"model.init.ply '{init.ply}' holds no Gaussians; there is nothing to train")
    pad = torch.zeros(n, num_sh_bases(wanted) - num_sh_bases(degree), 3)
    return GaussianModel({**params, "shN": torch.cat([params["shN"], pad], dim=1)}, wanted)
