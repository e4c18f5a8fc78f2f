"""The Gaussians a run starts from: a PLY, the scene's sparse points, or random points."""

from __future__ import annotations

from typing import Callable, List

import torch

from ..cameras import Camera
from ..data.pipeline import focus_point
from ..data.types import SceneData
from ..errors import ConfigError, DataError
from ..io.gaussians_file import read_gaussians_file
from ..io.limits import require_memory
from ..model.gaussians import GaussianModel
from ..model.neighbours import knn_memory_bytes


def build_model(cfg, scene: SceneData, train_cameras: List[Camera], info: Callable[[str], None]) -> GaussianModel:
    """The initial model for ``cfg.model`` (``init.ply``, ``init.type`` points or random)."""
    init = cfg.model.init
    generator = torch.Generator().manual_seed(cfg.seed)
    if init.ply is not None:
        return _model_from_ply(init, cfg.model.sh_degree, info)
    use_points = init.type == "points" or (init.type == "auto" and scene.points is not None)
    if use_points:
        if scene.points is None:
            raise ConfigError(f"model.init.type is 'points' but {cfg.data.path} has no sparse points")
        require_init_memory(len(scene.points), cfg.model.sh_degree, f"the {len(scene.points)} sparse points of {cfg.data.path}")
        return GaussianModel.from_points(
            torch.from_numpy(scene.points),
            torch.from_numpy(scene.point_colors).float() / 255.0,
            cfg.model.sh_degree,
            opacity=init.opacity,
            scale_factor=init.scale_factor,
            generator=generator,
        )
    require_init_memory(init.num_points, cfg.model.sh_degree, f"model.init.num_points={init.num_points}")
    return GaussianModel.random(
        init.num_points,
        focus_point(train_cameras),
        init.extent,
        cfg.model.sh_degree,
        opacity=init.opacity,
        scale_factor=init.scale_factor,
        generator=generator,
    )


def require_init_memory(count: int, sh_degree: int, what: str) -> None:
    """Refuse (one line, with the estimate) a start of ``count`` Gaussians whose training state
    (parameters, gradients, Adam moments, densification's copies and the renderer's buffers) and
    nearest-neighbour scale estimate cannot fit in memory."""
    floats = 3 + 3 + 4 + 1 + 3 * (sh_degree + 1) ** 2
    render = 256  # the renderer's per-Gaussian buffers at the backward pass's peak (docs/benchmarks.md)
    needed = count * (floats * 4 * 7 + render) + knn_memory_bytes(count)
    try:
        require_memory(what, needed)
    except DataError as err:
        raise ConfigError(str(err)) from None


def _model_from_ply(init, wanted: int, info: Callable[[str], None]) -> GaussianModel:
    if init.type != "auto":
        raise ConfigError(f"model.init.ply is set, so model.init.type must be 'auto', not {init.type!r}")
    params, degree = read_gaussians_file(init.ply)
    if degree > wanted:
        raise ConfigError(f"model.init.ply '{init.ply}' has SH degree {degree}; set model.sh_degree={degree}")
    n = params["means"].shape[0]
    if n == 0:
        raise ConfigError(f"model.init.ply '{init.ply}' holds no Gaussians; there is nothing to train")
    pad = torch.zeros(n, (wanted + 1) ** 2 - (degree + 1) ** 2, 3)
    params["shN"] = torch.cat([params["shN"], pad], dim=1)
    info(f"initialised {n} Gaussians from {init.ply}")
    return GaussianModel(params, wanted)
