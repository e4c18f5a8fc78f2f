"""Nearest-neighbour distances of the initial points: a k-d tree in the compiled library when it
is at hand (O(N log N): about 10 ms for the 9,262 points of a small COLMAP capture), else scipy's
k-d tree, or for a few thousand points a direct comparison in PyTorch. The three find the same
neighbours; their float64 distances differ in the last bit at most (the roots are rounded
differently), and the compiled tree gives the PyTorch comparison's values on sets like the demo's.

The initial scale of every Gaussian is the distance to its nearest neighbours. A brute-force
comparison of every point with every point takes minutes at 200k points and hours at a
million; a k-d tree answers a million points in seconds. Loading scipy's tree costs 0.3-0.6 s
of start-up on a small machine, though, which is more than comparing a few thousand points
directly (0.15 s at 5,000), so without the library small sets take the direct path, and with it
scipy is not loaded at all. Every path works in blocks so that a stop signal is acted on between
them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .. import interrupts
from ..kernels.build import cached_library
from ..kernels.threads import loop_threads

QUERY_CHUNK = 131_072
"""Points queried from the tree between two checks for a stop signal."""

DIRECT_MAX = 8192
"""Without the compiled library, up to this many points are compared directly, without loading scipy."""

DIRECT_BLOCK = 1024
"""Rows of the distance block the direct path computes at once."""

KERNEL_MAX_K = 3
"""The most neighbours the compiled tree averages per point (more: the other paths). Up to three,
PyTorch's mean adds the squares one after another, as the library does; over more it adds them in
vector lanes, in another order."""


def mean_knn_distance(points: Tensor, k: int = 3) -> Tensor:
    """Root mean squared distance of each point to its ``k`` nearest other points [N].

    Works for points on any device (computed on the CPU in float64, the result returned on the
    points' device, in their dtype). Duplicated points are each other's neighbours at distance 0.
    """
    n = points.shape[0]
    if n <= 1:
        return torch.ones(n, dtype=points.dtype, device=points.device)
    k = min(k, n - 1)
    coords = points.detach().to("cpu", torch.float64)
    library = cached_library()  # compiled already (the cpu renderer uses it): never built for this alone
    if library is not None and k <= KERNEL_MAX_K:
        out = _tree_compiled(library.handle, coords, k)
    else:
        out = _direct_torch(coords, k) if n <= DIRECT_MAX else _tree(coords.numpy(), k)
    return torch.from_numpy(out).to(device=points.device, dtype=points.dtype)


def knn_memory_bytes(count: int, k: int = 3) -> int:
    """The most memory :func:`mean_knn_distance` holds for ``count`` points (an estimate)."""
    if count <= DIRECT_MAX:
        return min(count, DIRECT_BLOCK) * count * 8 * 2  # one block of distances and its selection
    answers = min(count, QUERY_CHUNK) * (k + 1) * 16  # one chunk's distances and indices
    return count * 64 + answers  # the coordinates and the tree: about 64 bytes a point


def _tree_compiled(handle, coords: Tensor, k: int) -> np.ndarray:
    """:func:`_direct_torch`'s values through the compiled k-d tree, in blocks of queries (stop
    signals between them)."""
    points = np.ascontiguousarray(coords.numpy())
    n = points.shape[0]
    perm = np.empty(n, dtype=np.int64)
    axis = np.empty(n, dtype=np.int8)
    handle.splat_knn_tree_build_f64(points.ctypes.data, n, perm.ctypes.data, axis.ctypes.data)
    out = np.empty(n, dtype=np.float64)
    for start in range(0, n, QUERY_CHUNK):
        interrupts.check()
        view = out[start : start + QUERY_CHUNK]
        status = handle.splat_knn_tree_mean_f64(points.ctypes.data, n, perm.ctypes.data, axis.ctypes.data, start,
                                                view.shape[0], k, view.ctypes.data, loop_threads())
        if status != 0:
            raise ValueError(f"nearest neighbours: k={k} out of range for {n} points")
    return torch.from_numpy(out).sqrt().numpy()  # torch's root, as the PyTorch path takes it


def _direct_torch(coords: Tensor, k: int) -> np.ndarray:
    out = np.empty(coords.shape[0], dtype=np.float64)
    for start in range(0, coords.shape[0], DIRECT_BLOCK):
        interrupts.check()
        block = torch.cdist(coords[start : start + DIRECT_BLOCK], coords, compute_mode="donot_use_mm_for_euclid_dist")
        nearest = block.topk(k + 1, dim=1, largest=False).values[:, 1:]  # the nearest is the point itself
        out[start : start + block.shape[0]] = nearest.square().mean(dim=1).sqrt().numpy()
    return out


def _tree(coords: np.ndarray, k: int) -> np.ndarray:
    from scipy.spatial import cKDTree  # scipy's import costs start-up time: loaded only for large sets

    tree = cKDTree(coords)
    out = np.empty(coords.shape[0], dtype=np.float64)
    for start in range(0, coords.shape[0], QUERY_CHUNK):
        interrupts.check()
        block = coords[start : start + QUERY_CHUNK]
        distances, _ = tree.query(block, k=k + 1, workers=-1)
        out[start : start + len(block)] = np.sqrt(np.mean(np.square(distances[:, 1:]), axis=1))
    return out


__all__ = ["DIRECT_BLOCK", "DIRECT_MAX", "QUERY_CHUNK", "knn_memory_bytes", "mean_knn_distance"]
