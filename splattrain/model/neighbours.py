"""Nearest-neighbour distances of the initial points, through scipy's k-d tree (O(N log N)).

The initial scale of every Gaussian is the distance to its nearest neighbours. A brute-force
comparison of every point with every point takes minutes at 200k points and hours at a
million; a k-d tree answers a million points in seconds. The queries run in chunks so that a
stop signal is acted on between them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .. import interrupts

QUERY_CHUNK = 131_072
"""Points queried between two checks for a stop signal."""


def mean_knn_distance(points: Tensor, k: int = 3) -> Tensor:
    """Root mean squared distance of each point to its ``k`` nearest other points [N].

    Works for points on any device (the tree is built on the CPU, the result returned on the
    points' device, in their dtype). Duplicated points are each other's neighbours at distance 0.
    """
    from scipy.spatial import cKDTree  # scipy's import costs start-up time: loaded when a scene is

    n = points.shape[0]
    if n <= 1:
        return torch.ones(n, dtype=points.dtype, device=points.device)
    k = min(k, n - 1)
    coords = points.detach().to("cpu", torch.float64).numpy()
    tree = cKDTree(coords)
    out = np.empty(n, dtype=np.float64)
    for start in range(0, n, QUERY_CHUNK):
        interrupts.check()
        block = coords[start : start + QUERY_CHUNK]
        distances, _ = tree.query(block, k=k + 1, workers=-1)  # the nearest is the point itself
        out[start : start + len(block)] = np.sqrt(np.mean(np.square(distances[:, 1:]), axis=1))
    return torch.from_numpy(out).to(device=points.device, dtype=points.dtype)


__all__ = ["QUERY_CHUNK", "mean_knn_distance"]
