"""The PlayCanvas / SuperSplat compressed PLY: written by gsplat's exporter, read here.

Gaussians are grouped in chunks of 256 (sorted along a Morton curve). Each chunk stores
float bounds of position, log scale and base colour; each Gaussian stores four uint32:
position and log scale as 11-10-11 bit fractions of their chunk's bounds, rotation as the
smallest three quaternion components (2 + 3 x 10 bits) and colour + opacity as 4 x 8 bits.
Higher-order SH are one byte each. gsplat drops Gaussians with opacity below 1/255.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from ..model.gaussians import SH_C0
from .atomic import atomic_write_bytes
from .limits import require_finite
from .ply import ANTIALIASED_COMMENT, PlyFile

_CHUNK = 256
_MIN_OPACITY = 1.0 / 255.0  # gsplat drops Gaussians at or below it
_CHUNK_FIELDS = [f"{end}_{prefix}{axis}" for prefix in ("", "scale_") for end in ("min", "max") for axis in "xyz"]
_VERTEX_FIELDS = ["packed_position", "packed_rotation", "packed_scale", "packed_color"]
_MAX_LOGIT = 12.0


def add_header_comment(blob: bytes, comment: str) -> bytes:
    """``blob`` (a PLY) with ``comment <comment>`` inserted after its format line."""
    marker = b"format binary_little_endian 1.0\n"
    at = blob.index(marker) + len(marker)
    return blob[:at] + f"comment {comment}\n".encode("ascii") + blob[at:]


def encode_compressed_ply(params: Dict[str, Tensor], antialiased: bool = False) -> bytes:
    """Compressed PLY bytes of raw Gaussian parameters (gsplat's ``export_splats``); with no
    Gaussian left (none, or all below gsplat's opacity cut) a valid file with empty elements."""
    from gsplat import export_splats

    if not bool((torch.sigmoid(params["opacities"].detach().float()) > _MIN_OPACITY).any()):
        blob = _empty_compressed_ply(params["shN"].shape[1] * 3)
        return add_header_comment(blob, ANTIALIASED_COMMENT) if antialiased else blob
    with torch.no_grad():
        blob = export_splats(
            means=params["means"].detach().float().cpu(),
            scales=params["scales"].detach().float().cpu(),
            quats=params["quats"].detach().float().cpu(),
            opacities=params["opacities"].detach().float().cpu().reshape(-1),
            sh0=params["sh0"].detach().float().cpu().reshape(-1, 1, 3),
            shN=params["shN"].detach().float().cpu(),
            format="ply_compressed",
        )
    return add_header_comment(blob, ANTIALIASED_COMMENT) if antialiased else blob


def _empty_compressed_ply(num_rest: int) -> bytes:
    """The header gsplat writes, for no Gaussians."""
    lines = ["ply", "format binary_little_endian 1.0", "element chunk 0"]
    lines += [f"property float {name}" for name in _CHUNK_FIELDS + [f"{end}_{c}" for end in ("min", "max") for c in "rgb"]]
    lines += ["element vertex 0"] + [f"property uint {name}" for name in _VERTEX_FIELDS]
    lines += ["element sh 0"] + [f"property uchar f_rest_{j}" for j in range(num_rest)]
    return ("\n".join(lines + ["end_header"]) + "\n").encode("ascii")


def write_compressed_ply(path: str | Path, params: Dict[str, Tensor], antialiased: bool = False) -> None:
    """Write ``path`` as a PlayCanvas compressed PLY, atomically."""
    blob = encode_compressed_ply(params, antialiased)
    atomic_write_bytes(path, lambda handle: handle.write(blob))


def is_compressed_ply(ply: PlyFile) -> bool:
    """Whether a parsed PLY has the compressed layout (a chunk element and packed vertices)."""
    vertex = ply.elements.get("vertex")
    return "chunk" in ply.elements and vertex is not None and "packed_position" in (vertex.dtype.names or ())


def _unorm(value: np.ndarray, bits: int) -> np.ndarray:
    return (value & ((1 << bits) - 1)).astype(np.float32) / np.float32((1 << bits) - 1)


def _unpack_111011(value: np.ndarray) -> np.ndarray:
    return np.stack([_unorm(value >> 21, 11), _unorm(value >> 11, 10), _unorm(value, 11)], axis=1)


def _unpack_rotation(value: np.ndarray) -> np.ndarray:
    """wxyz quaternions from the smallest-three packing (largest component index in the top 2 bits)."""
    norm = np.float32(1.0 / (math.sqrt(2) * 0.5))
    a = (_unorm(value >> 20, 10) - 0.5) * norm
    b = (_unorm(value >> 10, 10) - 0.5) * norm
    c = (_unorm(value, 10) - 0.5) * norm
    m = np.sqrt(np.maximum(0.0, 1.0 - (a * a + b * b + c * c)))
    largest = (value >> 30).astype(np.int64)
    order = np.array([[0, 1, 2, 3], [1, 0, 2, 3], [2, 0, 1, 3], [3, 0, 1, 2]])  # where m, a, b, c go
    stacked = np.stack([m, a, b, c], axis=1)
    out = np.empty_like(stacked)
    rows = np.arange(len(value))[:, None]
    out[rows, order[largest]] = stacked
    return out


def compressed_ply_to_gaussians(ply: PlyFile, name: str) -> Tuple[Dict[str, Tensor], int]:
    """Raw parameters and SH degree from a parsed compressed PLY."""
    chunks, vertex = ply.elements["chunk"], ply.elements["vertex"]
    sh = ply.elements.get("sh")
    n_rest = len(sh.dtype.names) if sh is not None else 0
    wanted = [("chunk", chunks, _CHUNK_FIELDS), ("vertex", vertex, _VERTEX_FIELDS),
              ("sh", sh, [f"f_rest_{j}" for j in range(n_rest)])]
    for element, array, fields in wanted:
        missing = [field for field in fields if field not in (array.dtype.names or ())]
        if missing:
            raise DataError(f"{name}: a compressed PLY whose '{element}' lacks {', '.join(missing)}")
    n = len(vertex)
    if sh is not None and len(sh) != n:
        raise DataError(f"{name}: {len(sh)} SH rows for {n} Gaussians")
    if len(chunks) * _CHUNK < n:
        raise DataError(f"{name}: {len(chunks)} chunks cannot hold {n} Gaussians")
    index = np.arange(n) // _CHUNK

    def bounds(prefix: str, axes: str) -> Tuple[np.ndarray, np.ndarray]:
        lo = np.stack([chunks[f"min_{prefix}{a}"] for a in axes], axis=1)[index]
        hi = np.stack([chunks[f"max_{prefix}{a}"] for a in axes], axis=1)[index]
        return lo.astype(np.float32), hi.astype(np.float32)

    names = set(chunks.dtype.names or ())
    lo, hi = bounds("", "xyz")
    means = lo + _unpack_111011(vertex["packed_position"]) * (hi - lo)
    lo, hi = bounds("scale_", "xyz")
    scales = lo + _unpack_111011(vertex["packed_scale"]) * (hi - lo)
    color = vertex["packed_color"]
    rgba = np.stack([_unorm(color >> 24, 8), _unorm(color >> 16, 8), _unorm(color >> 8, 8), _unorm(color, 8)], axis=1)
    rgb = rgba[:, :3]
    if {"min_r", "max_r"} <= names:
        lo, hi = bounds("", "rgb")
        rgb = lo + rgb * (hi - lo)
    alpha = np.clip(rgba[:, 3].astype(np.float64), 1e-12, 1.0 - 1e-12)
    opacities = np.clip(np.log(alpha / (1.0 - alpha)), -_MAX_LOGIT, _MAX_LOGIT)
    quats = _unpack_rotation(vertex["packed_rotation"])
    degree = int(round(math.sqrt(n_rest // 3 + 1))) - 1
    if n_rest % 3 or (degree + 1) ** 2 - 1 != n_rest // 3:
        raise DataError(f"{name}: {n_rest} SH bytes per Gaussian do not make a whole SH degree")
    if n_rest:
        raw = np.stack([sh[f"f_rest_{j}"] for j in range(n_rest)], axis=1).astype(np.float32)
        # The PlayCanvas decoder: byte 0 stands for the lowest value, others for their bucket centre.
        unit = np.where(raw == 0, 0.0, (raw + 0.5) / 256.0)
        rest = ((unit - 0.5) * 8.0).reshape(n, 3, n_rest // 3).transpose(0, 2, 1)
    else:
        rest = np.zeros((n, 0, 3), np.float32)
    params = {
        "means": torch.from_numpy(np.ascontiguousarray(means, np.float32)),
        "scales": torch.from_numpy(np.ascontiguousarray(scales, np.float32)),
        "quats": torch.from_numpy(np.ascontiguousarray(quats, np.float32)),
        "opacities": torch.from_numpy(opacities.astype(np.float32)),
        "sh0": torch.from_numpy(((rgb - 0.5) / SH_C0).astype(np.float32)).reshape(n, 1, 3),
        "shN": torch.from_numpy(np.ascontiguousarray(rest, np.float32)),
    }
    require_finite(params, name)
    return params, degree
