"""``splattrain export --format mesh``: a coloured triangle mesh fused from depth rendered along
the training cameras (docs/mesh.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from rich.progress import Progress

from .. import interrupts
from ..console import Console
from ..errors import UserError
from ..mesh import TsdfFusion, default_settings, import_open3d, keep_largest_components, write_mesh
from ..mesh.files import MESH_SUFFIXES
from ..mesh.views import check_depth_mode, render_depth_views, seen_extent
from .snapshot import Snapshot

#: Connected components kept by default (2DGS keeps 50): floaters and fragments go.
DEFAULT_COMPONENTS = 50


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
        """UserError in one line for a bad option (and an ``out`` that is not .ply or .obj)."""
        check_depth_mode(self.depth)
        for name in ("voxel_size", "trunc", "max_depth"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UserError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
        if self.voxel_size is not None and self.trunc is not None and self.trunc < self.voxel_size:
            raise UserError(f"--trunc must be at least the voxel size ({self.voxel_size:.4g}), got {self.trunc}")
        if self.components < 0:
            raise UserError(f"--components must be >= 0 (0 keeps all), got {self.components}")
        if not (math.isfinite(self.min_views) and self.min_views >= 1):
            raise UserError(f"--min-views must be at least 1, got {self.min_views}")
        if out is not None and Path(out).suffix.lower() not in MESH_SUFFIXES:
            raise UserError(f"--out {out}: a mesh is written as .ply or .obj")


def _world_scale(snapshot: Snapshot, world_frame: str) -> tuple[float, np.ndarray]:
    """(s, t) of the training frame's x = s * x_out + t for the frame the mesh is written in."""
    transform = snapshot.checkpoint.get("world_transform")
    if world_frame != "original" or transform is None:
        return 1.0, np.zeros(3)
    matrix = torch.as_tensor(transform, dtype=torch.float64).numpy()
    return float(np.cbrt(np.linalg.det(matrix[:3, :3]))), matrix[:3, 3]


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
    renderer = snapshot.renderer(log=console.debug, warn=console.warning)
    model, sh_degree, background = snapshot.model, snapshot.sh_degree, snapshot.background
    given = {name: None if getattr(options, name) is None else getattr(options, name) * scale
             for name in ("voxel_size", "trunc", "max_depth")}
    extent = 0.0
    if given["voxel_size"] is None:
        extent = seen_extent(renderer, model, cameras, sh_degree, background,
                             max_depth=math.inf if given["max_depth"] is None else given["max_depth"])
    settings = default_settings(extent, min_views=options.min_views, **given)
    console.info(f"fusing {options.depth} depth from {len(cameras)} training views: voxel {settings.voxel_size / scale:.4g}, "
                 f"truncation {settings.trunc / scale:.4g}" + (f" (extent seen {extent / scale:.4g})" if extent else ""))
    fusion = TsdfFusion(settings)
    with Progress(console=console.terminal, disable=console.quiet) as progress:
        task = progress.add_task(f"fusing {len(cameras)} views", total=len(cameras))
        for view in render_depth_views(renderer, model, cameras, sh_degree, background, options.depth):
            interrupts.check()
            fusion.integrate(view.rgb, view.depth, view.camera.K.cpu().numpy(), view.camera.viewmat.cpu().numpy())
            progress.advance(task)
    mesh = fusion.extract()
    if not len(mesh.faces):
        raise UserError(f"no surface was found (no voxel seen by {options.min_views:g} views): lower --min-views, "
                        "or check the run renders its training views")
    found = len(mesh.faces)
    mesh = keep_largest_components(mesh, options.components)
    if scale != 1.0 or shift.any():
        mesh = mesh.transformed(1.0 / scale, -shift / scale)
    write_mesh(path, mesh)
    kept = "" if found == len(mesh.faces) else f" (the {options.components} largest components of {found:,})"
    console.info(f"wrote a mesh of {len(mesh.vertices):,} vertices and {len(mesh.faces):,} triangles{kept} to {path} "
                 f"({world_frame} frame, {fusion.blocks:,} voxel blocks, {time.perf_counter() - start:.1f} s)")
    return path
