"""The standard 3DGS PLY layout (binary little endian), as splat viewers read it."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, NamedTuple

import numpy as np
from torch import Tensor

from .atomic import atomic_write_bytes
from .limits import require_finite


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
    rest = shN.transpose(0, 2, 1).reshape(n, 3 * shN.shape[1])
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


#: Header lines a PLY may have (elements, properties and comments together).
MAX_HEADER_LINES = 4096
#: The header comment that marks a scene trained with the antialiased (mip-splatting) rasterizer.
ANTIALIASED_COMMENT = "antialiased"


def write_ply(path: str | Path, params: Dict[str, Tensor], antialiased: bool = False) -> None:
    """Write Gaussians to ``path`` as a standard 3DGS PLY, atomically.

    ``antialiased`` adds the header line ``comment antialiased`` for viewers that honour it.
    """
    vertices = gaussians_to_ply_array(params)
    header = ["ply", "format binary_little_endian 1.0"]
    header += [f"comment {ANTIALIASED_COMMENT}"] if antialiased else []
    header.append(f"element vertex {len(vertices)}")
    header += [f"property float {name}" for name in vertices.dtype.names]
    header.append("end_header")
    blob = ("\n".join(header) + "\n").encode("ascii")

    def write(handle) -> None:
        handle.write(blob)
        handle.write(vertices.tobytes())

    atomic_write_bytes(path, write)


_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}


class PlyFile(NamedTuple):
    """The elements of a binary little-endian PLY (name -> structured array) and its comment lines."""

    elements: Dict[str, np.ndarray]
    comments: List[str]


def read_ply(path: str | Path) -> PlyFile:
    """Every element of a binary little-endian PLY without list properties.

    Raises DataError naming the file for other formats, list properties or short files.
    """
    from ..errors import DataError

    path = Path(path)
    if not path.is_file():
        raise DataError(f"PLY file '{path}' not found")
    raw = path.read_bytes()
    end = raw.find(b"end_header\n")
    if not raw.startswith(b"ply\n") or end < 0:
        raise DataError(f"{path}: not a PLY file (no 'ply' / 'end_header')")
    lines = raw[:end].decode("ascii", errors="replace").splitlines()
    if len(lines) > MAX_HEADER_LINES:
        raise DataError(f"{path}: a PLY header of {len(lines)} lines (splattrain reads at most {MAX_HEADER_LINES}; "
                        "a 3DGS scene has about 70)")
    if "format binary_little_endian 1.0" not in lines:
        raise DataError(f"{path}: only binary_little_endian PLY files are supported")
    layout: list[tuple[str, int, list[tuple[str, str]]]] = []
    names: List[set] = []  # each element's property names
    comments = []
    for line in lines:
        parts = line.split()
        if parts[:1] == ["comment"]:
            comments.append(line[len("comment") :].strip())
        elif parts[:1] == ["element"]:
            layout.append((_element_name(parts, path), _element_count(parts, path), []))
            names.append(set())
        elif parts[:1] == ["property"] and layout:
            element, _, fields = layout[-1]
            if len(parts) != 3 or parts[1] == "list" or parts[1] not in _PLY_TYPES:
                raise DataError(f"{path}: unsupported property '{line.strip()}' in element '{element}'")
            if parts[2] in names[-1]:
                raise DataError(f"{path}: element '{element}' has property '{parts[2]}' twice")
            fields.append((parts[2], "<" + _PLY_TYPES[parts[1]]))
            names[-1].add(parts[2])
    if len({name for name, _, _ in layout}) != len(layout):
        raise DataError(f"{path}: an element is declared twice")
    elements: Dict[str, np.ndarray] = {}
    offset = end + len(b"end_header\n")
    for name, count, fields in layout:
        dtype = np.dtype(fields)
        if len(raw) - offset < count * dtype.itemsize:
            raise DataError(
                f"{path}: truncated or declares too many '{name}' ({count} x {dtype.itemsize} bytes, "
                f"{len(raw) - offset} left)"
            )
        elements[name] = np.frombuffer(raw, dtype=dtype, count=count, offset=offset)
        offset += count * dtype.itemsize
    return PlyFile(elements, comments)


def _element_name(parts: list[str], path: Path) -> str:
    from ..errors import DataError

    if len(parts) != 3:
        raise DataError(f"{path}: header line '{' '.join(parts)}' is not 'element <name> <count>'")
    return parts[1]


def _element_count(parts: list[str], path: Path) -> int:
    from ..errors import DataError

    if not (parts[2].isascii() and parts[2].isdigit()):
        raise DataError(f"{path}: element '{parts[1]}' has count '{parts[2]}', not a whole number >= 0")
    return int(parts[2])


def read_ply_vertices(path: str | Path) -> np.ndarray:
    """The vertex element of a binary little-endian PLY as a structured array."""
    from ..errors import DataError

    elements = read_ply(path).elements
    if "vertex" not in elements:
        raise DataError(f"{path}: no 'vertex' element")
    return elements["vertex"]


def read_ply_gaussians(path: str | Path) -> tuple[Dict[str, Tensor], int]:
    """Raw Gaussian parameters and SH degree from a standard 3DGS PLY (splattrain's or the original's)."""
    return vertices_to_gaussians(read_ply_vertices(path), path)


def vertices_to_gaussians(vertices: np.ndarray, path: str | Path) -> tuple[Dict[str, Tensor], int]:
    """Raw Gaussian parameters and SH degree from the vertex element of a standard 3DGS PLY."""
    import torch

    from ..errors import DataError

    names = set(vertices.dtype.names or ())
    required = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
                "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [name for name in required if name not in names]
    if missing:
        raise DataError(f"{path}: not a 3DGS PLY, missing properties {', '.join(missing)}")
    n_rest = sum(1 for name in names if name.startswith("f_rest_"))
    gaps = [f"f_rest_{i}" for i in range(n_rest) if f"f_rest_{i}" not in names]
    if gaps:
        raise DataError(f"{path}: {n_rest} f_rest properties but not f_rest_0..f_rest_{n_rest - 1} ({gaps[0]} is missing)")
    degree = int(round(((n_rest // 3) + 1) ** 0.5)) - 1
    if n_rest % 3 or (degree + 1) ** 2 - 1 != n_rest // 3:
        raise DataError(f"{path}: {n_rest} f_rest properties do not make a whole SH degree")

    def stack(columns: list[str]) -> Tensor:
        with np.errstate(over="ignore", invalid="ignore"):  # doubles beyond float32 become inf: refused below
            return torch.from_numpy(np.stack([vertices[c].astype(np.float32) for c in columns], axis=1))

    n = len(vertices)
    rest = stack([f"f_rest_{i}" for i in range(n_rest)]) if n_rest else torch.zeros(n, 0)
    params = {
        "means": stack(["x", "y", "z"]),
        "scales": stack(["scale_0", "scale_1", "scale_2"]),
        "quats": stack(["rot_0", "rot_1", "rot_2", "rot_3"]),
        "opacities": stack(["opacity"])[:, 0].contiguous(),
        "sh0": stack(["f_dc_0", "f_dc_1", "f_dc_2"]).reshape(n, 1, 3),
        "shN": rest.reshape(n, 3, n_rest // 3).transpose(1, 2).contiguous(),
    }
    require_finite(params, str(path))
    return params, degree
