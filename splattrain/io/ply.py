"""The standard 3DGS PLY layout (binary little endian), as splat viewers read it."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
from torch import Tensor

from .atomic import atomic_write_bytes


def ply_property_names(num_rest: int) -> list[str]:
    """Vertex property names for ``num_rest`` higher-order SH coefficients per channel."""
    names = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    names += [f"f_rest_{i}" for i in range(3 * num_rest)]
    names += ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    return names


def gaussians_to_ply_array(params: Dict[str, Tensor]) -> np.ndarray:
    """Pack raw parameters into a float32 structured array in the 3DGS field order.

    ``f_rest`` is channel-major (all R coefficients, then G, then B); opacity is the
    logit, scales the logs, rotation the (unnormalised) wxyz quaternion.
    """
    means = params["means"].detach().cpu().float().numpy()
    n = means.shape[0]
    sh0 = params["sh0"].detach().cpu().float().numpy().reshape(n, 3)
    shN = params["shN"].detach().cpu().float().numpy()  # [N, K-1, 3]
    rest = shN.transpose(0, 2, 1).reshape(n, -1)
    columns = [
        means,
        np.zeros((n, 3), np.float32),
        sh0,
        rest,
        params["opacities"].detach().cpu().float().numpy().reshape(n, 1),
        params["scales"].detach().cpu().float().numpy(),
        params["quats"].detach().cpu().float().numpy(),
    ]
    data = np.concatenate(columns, axis=1).astype(np.float32)
    names = ply_property_names(shN.shape[1])
    out = np.empty(n, dtype=[(name, "<f4") for name in names])
    for i, name in enumerate(names):
        out[name] = data[:, i]
    return out


def write_ply(path: str | Path, params: Dict[str, Tensor]) -> None:
    """Write Gaussians to ``path`` as a standard 3DGS PLY, atomically."""
    vertices = gaussians_to_ply_array(params)
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {len(vertices)}"]
    header += [f"property float {name}" for name in vertices.dtype.names]
    header.append("end_header")
    blob = ("\n".join(header) + "\n").encode("ascii")

    def write(handle) -> None:
        handle.write(blob)
        handle.write(vertices.tobytes())

    atomic_write_bytes(path, write)
