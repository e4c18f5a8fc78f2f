"""``splattrain export --format mesh``: a coloured triangle mesh fused from depth rendered along
the training cameras (docs/mesh.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch
from rich.progress import Progress

from .. import interrupts
from ..console import Console
from ..errors import DataError, UserError
from ..io.limits import require_memory
from ..mesh import FusionSettings, default_settings, import_open3d, write_mesh
from ..mesh.budget import MAX_TRUNC_VOXELS, FusionEstimate, check_voxel_arithmetic, estimate_fusion, touched_blocks
from ..mesh.files import MESH_SUFFIXES
from ..mesh.views import DepthView, check_depth_mode, render_depth_views, seen_extent, surface_points, survey_views
from ..mesh.worker import FusionProcess
from .snapshot import Snapshot

#: Connected components kept by default (2DGS keeps 50): floaters and fragments go.
DEFAULT_COMPONENTS = 50
FLOAT32_TINY = float(np.finfo(np.float32).tiny)
#: The memory asked for over the estimate (which came within 5% of the blocks fused in tests).
ESTIMATE_MARGIN = 1.1


@dataclass
class MeshOptions:
    """The mesh options of ``export``; sizes are in the units of the frame the mesh is written in."""

    depth: str = "median"
    voxel_size: Optional[float] = None
    trunc: Optional[float] = None
    max_depth: Optional[float] = None
    components: int = DEFAULT_COMPONENTS
    min_views: float = 3.0

    def check(self, out: Optional[Path] = None) -> None:
        """UserError in one line for a bad option (and an ``out`` that is not .ply or .obj, or is a
        folder), before any work."""
        check_depth_mode(self.depth)
        for name in ("voxel_size", "trunc", "max_depth"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UserError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
            if name != "max_depth" and value is not None and float(np.float32(value)) < FLOAT32_TINY:
                raise UserError(f"--{name.replace('_', '-')} {value:g} is below float32's range (Open3D's sizes)")
        if self.voxel_size is not None and self.trunc is not None:
            if self.trunc < self.voxel_size:
                raise UserError(f"--trunc must be at least the voxel size ({self.voxel_size:.4g}), got {self.trunc}")
            if self.trunc > MAX_TRUNC_VOXELS * self.voxel_size:
                raise UserError(f"--trunc {self.trunc:g} is {self.trunc / self.voxel_size:.3g} voxels of "
                                f"{self.voxel_size:.4g}; give at most {MAX_TRUNC_VOXELS:g} voxels")
        if self.components < 0:
            raise UserError(f"--components must be >= 0 (0 keeps all), got {self.components}")
        if not (math.isfinite(self.min_views) and self.min_views >= 1):
            raise UserError(f"--min-views must be at least 1, got {self.min_views}")
        if out is not None:
            _check_out(Path(out))


def _check_out(out: Path) -> None:
    """UserError unless ``out`` is a .ply or .obj that can be written (not a folder, no file in
    the way of its folder)."""
    if out.suffix.lower() not in MESH_SUFFIXES:
        raise UserError(f"--out {out}: a mesh is written as .ply or .obj")
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; name the mesh file to write")
    folder = next((p for p in out.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise UserError(f"--out {out}: {folder} is a file, not a folder")


def _world_scale(snapshot: Snapshot, world_frame: str) -> tuple[float, np.ndarray]:
    """(s, t) of the training frame's x = s * x_out + t for the frame the mesh is written in."""
    transform = snapshot.checkpoint.get("world_transform")
    if world_frame != "original" or transform is None:
        return 1.0, np.zeros(3)
    matrix = torch.as_tensor(transform, dtype=torch.float64).numpy()
    return float(np.cbrt(np.linalg.det(matrix[:3, :3]))), matrix[:3, 3]


def _settings(options: MeshOptions, scale: float, survey: List[DepthView], cameras: list) -> Tuple[FusionSettings, float]:
    """The fusion settings in the training frame (sizes given are in the written frame, ``scale``
    times smaller) and the extent seen; UserError for sizes Open3D cannot fuse with exactly."""
    given = {name: None if getattr(options, name) is None else getattr(options, name) * scale
             for name in ("voxel_size", "trunc", "max_depth")}
    points = surface_points(survey, math.inf if given["max_depth"] is None else given["max_depth"])
    extent = seen_extent(points)
    settings = default_settings(extent, min_views=options.min_views, **given)
    centres = np.stack([c.center.double().cpu().numpy() for c in cameras]) if cameras else np.zeros((0, 3))
    reach = max(float(np.abs(points).max(initial=0.0)), float(np.abs(centres).max(initial=0.0))) + settings.trunc
    check_voxel_arithmetic(settings.voxel_size, settings.trunc, reach, unit=scale)
    return settings, extent


def _require_fusion_memory(settings: FusionSettings, survey: List[DepthView], scale: float) -> FusionEstimate:
    """Refuse, in one line, a fusion whose peak memory (estimated from the survey's depth) the
    machine cannot hold."""
    touched = [touched_blocks(v.depth, v.camera.K.double().cpu().numpy(), v.camera.viewmat.double().cpu().numpy(),
                              settings.voxel_size, settings.trunc, min(settings.max_depth, 1e30)) for v in survey]
    estimate = estimate_fusion(touched)
    try:
        require_memory(f"the TSDF volume (about {estimate.blocks:,} blocks of 16^3 voxels of "
                       f"{settings.voxel_size / scale:.4g}, truncation {settings.trunc / scale:.4g})",
                       estimate.needed_bytes * ESTIMATE_MARGIN)
    except DataError as error:
        raise DataError(f"{error}; use a larger --voxel-size (or a smaller --trunc, or --max-depth)") from None
    return estimate


def export_mesh(snapshot: Snapshot, console: Console, path: Path, world_frame: str, options: MeshOptions) -> Path:
    """Fuse ``options.depth`` depth from every training camera into a TSDF, extract a coloured mesh,
    keep its largest components and write it to ``path`` (.ply or .obj) in ``world_frame``."""
    options.check(path)
    import_open3d()  # the one-line install hint before any work
    start = time.perf_counter()
    scale, shift = _world_scale(snapshot, world_frame)
    cameras = [frame.camera for frame in snapshot.scene().train]
    if not cameras:
        raise UserError(f"{snapshot.path}: the run's dataset has no training cameras to fuse depth from")
    if options.min_views > len(cameras):
        raise UserError(f"--min-views {options.min_views:g}: the run has {len(cameras)} training views")
    renderer = snapshot.renderer(log=console.debug, warn=console.warning)
    model, sh_degree, background = snapshot.model, snapshot.sh_degree, snapshot.background
    survey = survey_views(renderer, model, cameras, sh_degree, background)
    settings, extent = _settings(options, scale, survey, cameras)
    estimate = _require_fusion_memory(settings, survey, scale)
    console.info(f"fusing {options.depth} depth from {len(cameras)} training views: voxel {settings.voxel_size / scale:.4g}, "
                 f"truncation {settings.trunc / scale:.4g}" + (f" (extent seen {extent / scale:.4g})" if extent else "")
                 + f", about {estimate.blocks:,} voxel blocks")
    with FusionProcess(settings) as fusion, Progress(console=console.terminal, disable=console.quiet) as progress:
        task = progress.add_task(f"fusing {len(cameras)} views", total=len(cameras))
        for view in render_depth_views(renderer, model, cameras, sh_degree, background, options.depth):
            interrupts.check()
            fusion.integrate(view.rgb, view.depth, view.camera.K.cpu().numpy(), view.camera.viewmat.cpu().numpy())
            progress.advance(task)
        mesh, found, blocks = fusion.extract(options.components)
    if not found:
        raise UserError(f"no surface was found (no voxel seen by {options.min_views:g} views): lower --min-views, "
                        "or check the run renders its training views")
    if scale != 1.0 or shift.any():
        mesh = mesh.transformed(1.0 / scale, -shift / scale)
    write_mesh(path, mesh)
    kept = "" if found == len(mesh.faces) else f" (the {options.components} largest components of {found:,})"
    console.info(f"wrote a mesh of {len(mesh.vertices):,} vertices and {len(mesh.faces):,} triangles{kept} to {path} "
                 f"({world_frame} frame, {blocks:,} voxel blocks, {time.perf_counter() - start:.1f} s)")
    return path
