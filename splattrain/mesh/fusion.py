"""TSDF fusion of depth maps into a coloured triangle mesh, with Open3D's ``VoxelBlockGrid``
(hashed blocks of 16^3 voxels on the CPU; marching cubes on extraction), the method 2DGS,
Gaussian Opacity Fields and PGSR use.

Memory: every block holds a TSDF value, a weight and a colour per voxel (80 KiB a block), and
the grid's hash map grows when it fills, holding the blocks it copies out and its new buffers at
once (budget.py). The whole fusion is estimated before it starts; here, before each depth map is
fused, the blocks it touches are counted again and a growth that the free memory cannot hold is
refused in one line, as is an extraction that cannot fit, so fusion never runs the machine out
of memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import DataError, UserError
from ..io.limits import require_memory
from .budget import BLOCK_BYTES, BLOCK_RESOLUTION, EXTRACT_BLOCK_BYTES, INITIAL_BLOCKS, MAX_TRUNC_VOXELS, grown_capacity
from .files import MeshArrays
from .open3d_backend import import_open3d

#: Default voxel size: the scene's extent over this many voxels.
VOXELS_PER_EXTENT = 256
#: Default truncation distance, in voxels.
TRUNC_VOXELS = 4.0


@dataclass(frozen=True)
class FusionSettings:
    """How depth maps are fused, in the units of the depth maps' frame.

    Attributes:
        voxel_size: edge of a TSDF voxel.
        trunc: truncation distance of the signed distance (at least one voxel).
        max_depth: depths beyond this are not fused (inf: all).
        min_views: a voxel must be seen by at least this many depth maps to take part in the surface.
    """

    voxel_size: float
    trunc: float
    max_depth: float = math.inf
    min_views: float = 3.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.voxel_size) and self.voxel_size > 0):
            raise UserError(f"--voxel-size must be a positive number, got {self.voxel_size}")
        if not (math.isfinite(self.trunc) and self.trunc >= self.voxel_size):
            raise UserError(f"--trunc must be at least the voxel size ({self.voxel_size:.4g}), got {self.trunc}")
        if self.trunc > MAX_TRUNC_VOXELS * self.voxel_size:
            raise UserError(f"--trunc {self.trunc:g} is {self.trunc / self.voxel_size:.3g} voxels of "
                            f"{self.voxel_size:.4g}; give at most {MAX_TRUNC_VOXELS:g} voxels")
        if not self.max_depth > 0:
            raise UserError(f"--max-depth must be a positive number, got {self.max_depth}")
        if not (math.isfinite(self.min_views) and self.min_views >= 1):
            raise UserError(f"--min-views must be at least 1, got {self.min_views}")


def default_settings(extent: float, voxel_size: Optional[float] = None, trunc: Optional[float] = None,
                     max_depth: Optional[float] = None, min_views: float = 3.0) -> FusionSettings:
    """Settings for a scene of ``extent`` (the diagonal of what the cameras see): voxels of
    ``extent / 256`` and a truncation of 4 voxels unless given."""
    if voxel_size is None:
        if not (math.isfinite(extent) and extent > 0):
            raise DataError("the scene's extent cannot be measured (no rendered depth): give --voxel-size")
        voxel_size = extent / VOXELS_PER_EXTENT
    if trunc is None:
        trunc = TRUNC_VOXELS * voxel_size
    return FusionSettings(voxel_size, trunc, math.inf if max_depth is None else max_depth, min_views)




class TsdfFusion:
    """Fuses depth maps (with colours) one at a time, then extracts the mesh."""

    def __init__(self, settings: FusionSettings) -> None:
        self.o3d = import_open3d()
        core = self.o3d.core
        self.settings = settings
        self.device = core.Device("CPU:0")
        self.grid = self.o3d.t.geometry.VoxelBlockGrid(
            attr_names=("tsdf", "weight", "color"), attr_dtypes=(core.float32, core.float32, core.float32),
            attr_channels=((1), (1), (3)), voxel_size=settings.voxel_size, block_resolution=BLOCK_RESOLUTION,
            block_count=INITIAL_BLOCKS, device=self.device,
        )
        self.views = 0

    @property
    def blocks(self) -> int:
        """Blocks of voxels allocated so far."""
        return int(self.grid.hashmap().size())

    def integrate(self, rgb: np.ndarray, depth: np.ndarray, K: np.ndarray, viewmat: np.ndarray) -> None:
        """Fuse one view: ``rgb`` uint8 [H, W, 3], ``depth`` float32 [H, W] along the camera's z
        (0 where there is none), pinhole ``K`` [3, 3] and world-to-camera ``viewmat`` [4, 4]
        (OpenCV axes, splattrain's pixel-centre convention). DataError, before anything is
        allocated, when the voxel blocks it needs cannot fit in memory."""
        if not (depth > 0).any():
            return
        core, s = self.o3d.core, self.settings
        depth_image = self.o3d.t.geometry.Image(core.Tensor(np.ascontiguousarray(depth, dtype=np.float32)))
        colour = np.ascontiguousarray(rgb, dtype=np.float32) / 255.0
        colour_image = self.o3d.t.geometry.Image(core.Tensor(colour))
        # Open3D reads pixel (i, j) as the square [i, i + 1) x [j, j + 1), as splattrain's K does.
        intrinsics = core.Tensor(np.asarray(K, dtype=np.float64), core.float64)
        extrinsics = core.Tensor(np.asarray(viewmat, dtype=np.float64), core.float64)
        max_depth = min(s.max_depth, 1e30)
        multiplier = s.trunc / s.voxel_size
        touched = self.grid.compute_unique_block_coordinates(depth_image, intrinsics, extrinsics, 1.0, max_depth,
                                                             multiplier)
        self._require_room(int(touched.shape[0]))
        self.grid.integrate(touched, depth_image, colour_image, intrinsics, intrinsics, extrinsics, 1.0, max_depth,
                            multiplier)
        self.views += 1

    def _require_room(self, incoming: int) -> None:
        """Refuse a view whose ``incoming`` blocks would make the hash map grow beyond the free
        memory: a growth holds the blocks copied out of the old buffers and the new buffers."""
        hashmap = self.grid.hashmap()
        size, capacity = int(hashmap.size()), int(hashmap.capacity())
        grown = grown_capacity(size, capacity, incoming)
        if grown != capacity:
            self._require(f"the TSDF volume (growing to {grown:,} blocks of {BLOCK_RESOLUTION}^3 voxels of "
                          f"{self.settings.voxel_size:.4g})", (size + grown) * BLOCK_BYTES)

    @staticmethod
    def _require(what: str, needed: float) -> None:
        try:
            require_memory(what, needed)
        except DataError as error:
            raise DataError(f"{error}; use a larger --voxel-size (or --max-depth)") from None

    def release(self) -> None:
        """Free the voxels (after :meth:`extract`); the fusion cannot be used afterwards."""
        del self.grid

    def extract(self) -> MeshArrays:
        """Marching cubes over the voxels seen by at least ``min_views`` views: the coloured mesh."""
        self._require(f"extracting the surface of {self.blocks:,} voxel blocks", self.blocks * EXTRACT_BLOCK_BYTES)
        mesh = self.grid.extract_triangle_mesh(weight_threshold=float(self.settings.min_views))
        vertices = mesh.vertex.positions.numpy().astype(np.float32)
        if not len(vertices):
            return MeshArrays(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32), np.zeros((0, 3), np.uint8))
        colors = np.clip(mesh.vertex.colors.numpy() * 255.0 + 0.5, 0, 255).astype(np.uint8)
        faces = mesh.triangle.indices.numpy().astype(np.int32)
        return MeshArrays(vertices, faces, colors)


def keep_largest_components(mesh: MeshArrays, count: int) -> MeshArrays:
    """The ``count`` connected components with the most triangles (0: all), unused vertices dropped."""
    if count <= 0 or not len(mesh.faces):
        return mesh
    o3d = import_open3d()
    legacy = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(mesh.vertices.astype(np.float64)),
                                       o3d.utility.Vector3iVector(mesh.faces))
    clusters, sizes, _ = legacy.cluster_connected_triangles()
    clusters, sizes = np.asarray(clusters), np.asarray(sizes)
    if len(sizes) <= count:
        return mesh
    kept = np.argsort(sizes, kind="stable")[::-1][:count]
    faces = mesh.faces[np.isin(clusters, kept)]
    used = np.unique(faces)
    remap = np.full(len(mesh.vertices), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return MeshArrays(mesh.vertices[used], remap[faces].astype(np.int32), mesh.colors[used])
