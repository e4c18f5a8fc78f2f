"""The memory a TSDF fusion will take, estimated before any depth is fused, and the sizes that
keep Open3D's voxel arithmetic exact.

Open3D's ``VoxelBlockGrid`` allocates a block of 16^3 voxels (80 KiB: a float32 TSDF value,
weight and colour per voxel) wherever a depth map touches one: for every 4th pixel in each
direction, the blocks holding 4 points spread evenly along its ray from ``depth - trunc`` to
``depth + trunc``. Its hash map grows when a view's blocks would overflow it, to twice its
capacity (or what the view needs, when more): the blocks it holds are copied out, then the new
buffers are allocated, so a growth holds the copy and the new buffers at once. Marching cubes
then takes 64 KiB a block more, and the mesh it makes. :func:`estimate_fusion` replays that rule
on depth rendered at a quarter of the cameras' resolution (one pixel there is one of Open3D's
samples), so the whole fusion's peak is known, and refused, before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import UserError

BLOCK_RESOLUTION = 16
#: Bytes of one block in the grid: float32 TSDF, weight and RGB per voxel.
BLOCK_BYTES = BLOCK_RESOLUTION**3 * (1 + 1 + 3) * 4
#: Bytes per block that marching cubes takes besides the grid: its per-voxel edge table (four
#: int32 a voxel) and an allowance for the vertices and triangles it makes.
EXTRACT_BLOCK_BYTES = BLOCK_RESOLUTION**3 * 4 * 4 + 64 * 1024
#: The fusion process itself (Python, NumPy and Open3D loaded), besides its voxels.
PROCESS_BYTES = 512 * 2**20
#: The hash map's capacity before it first grows.
INITIAL_BLOCKS = 512
#: Open3D's depth touch: every STRIDE-th pixel in each direction, SAMPLES points along its ray.
STRIDE, SAMPLES = 4, 4
#: The largest truncation distance, in voxels (4 blocks: beyond it Open3D's 4 samples per ray miss
#: blocks of the band, and memory grows with no gain).
MAX_TRUNC_VOXELS = 64.0
#: Voxel indices are float32 in Open3D's kernels: exact up to 2^24 voxels from the origin.
MAX_VOXEL_INDEX = 2.0**24


def check_voxel_arithmetic(voxel_size: float, trunc: float, reach: float, unit: float = 1.0) -> None:
    """UserError in one line when ``voxel_size`` or ``trunc`` fall outside float32, the truncation
    is outside [1, MAX_TRUNC_VOXELS] voxels, or the scene, reaching ``reach`` from the origin
    along an axis, lies farther than float32 voxel indices stay exact. Sizes are shown divided by
    ``unit`` (the frame the user gave them in)."""
    tiny, top = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
    for name, value in (("--voxel-size", voxel_size), ("--trunc", trunc)):
        if not tiny <= value * BLOCK_RESOLUTION < top:
            raise UserError(f"{name} {value / unit:g} is out of float32's range (Open3D's sizes)")
    voxels = trunc / voxel_size
    if not 1.0 <= voxels <= MAX_TRUNC_VOXELS:
        raise UserError(f"--trunc {trunc / unit:g} is {voxels:.3g} voxels of {voxel_size / unit:.4g}; give 1 to "
                        f"{MAX_TRUNC_VOXELS:g} voxels ({voxel_size / unit:.4g} to {MAX_TRUNC_VOXELS * voxel_size / unit:.4g})")
    if reach / voxel_size > MAX_VOXEL_INDEX:
        raise UserError(f"--voxel-size {voxel_size / unit:g} is too small: the scene reaches {reach / unit:.4g} from "
                        f"the origin, {reach / voxel_size:.3g} voxels, more than float32 voxel indices hold exactly "
                        f"({MAX_VOXEL_INDEX:,.0f}); use at least {reach / MAX_VOXEL_INDEX / unit:.3g}")


def touched_blocks(depth: np.ndarray, K: np.ndarray, viewmat: np.ndarray, voxel_size: float, trunc: float,
                   max_depth: float, stride: int = 1) -> np.ndarray:
    """The blocks Open3D allocates for ``depth`` [H, W] (z-depth, 0: none) seen by pinhole ``K``
    from world-to-camera ``viewmat``, sampling every ``stride``-th pixel: [B, 3] int64 block
    coordinates, unique."""
    rows, cols = np.nonzero(depth[::stride, ::stride] > 0)
    z = depth[rows * stride, cols * stride].astype(np.float64)
    keep = z < max_depth
    rows, cols, z = rows[keep] * stride, cols[keep] * stride, z[keep]
    if not len(z):
        return np.zeros((0, 3), np.int64)
    K = np.asarray(K, np.float64)
    rays = np.stack([(cols + 0.5 - K[0, 2]) / K[0, 0], (rows + 0.5 - K[1, 2]) / K[1, 1], np.ones_like(z)], axis=1)
    rotation, translation = np.asarray(viewmat, np.float64)[:3, :3], np.asarray(viewmat, np.float64)[:3, 3]
    origin = -rotation.T @ translation
    directions = rays @ rotation  # camera to world: R^T d, row-wise
    near, far = np.maximum(z - trunc, 0.0), np.minimum(z + trunc, max_depth)
    steps = np.linspace(0.0, 1.0, SAMPLES)
    t = near[:, None] + (far - near)[:, None] * steps[None, :]  # [M, SAMPLES]
    points = origin + t[..., None] * directions[:, None, :]
    blocks = np.floor(points.reshape(-1, 3) / (voxel_size * BLOCK_RESOLUTION)).astype(np.int64)
    return np.unique(blocks, axis=0)


@dataclass(frozen=True)
class FusionEstimate:
    """What a fusion takes: ``blocks`` allocated in the end, the hash map's final ``capacity``, and
    the ``peak_bytes`` of memory its voxels and the extraction hold at once (the process's own
    PROCESS_BYTES not included)."""

    blocks: int
    capacity: int
    peak_bytes: int

    @property
    def needed_bytes(self) -> int:
        """The peak with the fusion process's own memory."""
        return self.peak_bytes + PROCESS_BYTES


def grown_capacity(size: int, capacity: int, incoming: int) -> int:
    """The hash map's capacity after ``incoming`` blocks are activated in one holding ``size`` of
    ``capacity`` (Open3D counts every incoming block, new or not)."""
    if size + incoming <= capacity:
        return capacity
    return max(2 * capacity, size + incoming)


def estimate_fusion(views: Iterable[np.ndarray]) -> FusionEstimate:
    """Replay the hash map's growth over ``views`` (each the [B, 3] blocks one depth map touches,
    in fusion order): the final blocks and capacity and the peak memory."""
    per_view: list[np.ndarray] = [np.asarray(v, np.int64).reshape(-1, 3) for v in views]
    per_view = [v for v in per_view if len(v)]
    if not per_view:
        return FusionEstimate(0, INITIAL_BLOCKS, INITIAL_BLOCKS * BLOCK_BYTES)
    owner = np.concatenate([np.full(len(v), i) for i, v in enumerate(per_view)])
    _, first = np.unique(np.concatenate(per_view), axis=0, return_index=True)
    new_per_view = np.bincount(owner[first], minlength=len(per_view))
    size, capacity, peak = 0, INITIAL_BLOCKS, INITIAL_BLOCKS * BLOCK_BYTES
    for view, new in zip(per_view, new_per_view.tolist()):
        grown = grown_capacity(size, capacity, len(view))
        if grown != capacity:
            peak = max(peak, (size + grown) * BLOCK_BYTES)  # the blocks copied out and the new buffers
            capacity = grown
        size += new
    peak = max(peak, capacity * BLOCK_BYTES + size * EXTRACT_BLOCK_BYTES)
    return FusionEstimate(size, capacity, peak)
