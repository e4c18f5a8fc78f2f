"""Triangle meshes with vertex colours: binary PLY and OBJ files, written atomically, and mesh
PLYs read back with every count checked against the file before anything is allocated.

Written by hand (a few lines of NumPy) rather than through Open3D so that reading and writing
need no optional package and go through splattrain's atomic writes and size checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..errors import DataError, UserError
from ..io.atomic import atomic_write_bytes
from ..io.limits import require_memory

MESH_SUFFIXES = (".ply", ".obj")
_HEADER_LIMIT = 1 << 16
_PLY_SCALARS = {"float": "<f4", "float32": "<f4", "double": "<f8", "float64": "<f8", "uchar": "u1", "uint8": "u1",
                "char": "i1", "int8": "i1", "short": "<i2", "int16": "<i2", "ushort": "<u2", "uint16": "<u2",
                "int": "<i4", "int32": "<i4", "uint": "<u4", "uint32": "<u4"}


@dataclass
class MeshArrays:
    """A triangle mesh: ``vertices`` float32 [V, 3], ``faces`` int32 [F, 3] (counter-clockwise seen
    from outside), ``colors`` uint8 [V, 3]."""

    vertices: np.ndarray
    faces: np.ndarray
    colors: np.ndarray

    def transformed(self, scale: float, shift: np.ndarray) -> "MeshArrays":
        """The mesh with every vertex ``x`` moved to ``scale * x + shift``."""
        vertices = (self.vertices.astype(np.float64) * scale + shift).astype(np.float32)
        return MeshArrays(vertices, self.faces, self.colors)


def write_mesh(path: str | Path, mesh: MeshArrays) -> None:
    """Write ``mesh`` to ``path``, atomically: binary little-endian PLY for ``.ply``, OBJ with
    per-vertex colours (``v x y z r g b``, read by MeshLab, Blender and Open3D) for ``.obj``."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in MESH_SUFFIXES:
        raise UserError(f"--out {path}: a mesh is written as .ply or .obj")
    vertices = np.ascontiguousarray(mesh.vertices, dtype="<f4")
    colors = np.ascontiguousarray(mesh.colors, dtype=np.uint8)
    faces = np.ascontiguousarray(mesh.faces, dtype="<i4")
    if suffix == ".ply":
        header = "\n".join([
            "ply", "format binary_little_endian 1.0", "comment written by splattrain",
            f"element vertex {len(vertices)}", "property float x", "property float y", "property float z",
            "property uchar red", "property uchar green", "property uchar blue",
            f"element face {len(faces)}", "property list uchar int vertex_indices", "end_header",
        ]) + "\n"
        vertex_rows = np.empty(len(vertices), dtype=[("xyz", "<f4", 3), ("rgb", "u1", 3)])
        vertex_rows["xyz"], vertex_rows["rgb"] = vertices, colors
        face_rows = np.empty(len(faces), dtype=[("n", "u1"), ("ids", "<i4", 3)])
        face_rows["n"], face_rows["ids"] = 3, faces
        parts = [header.encode("ascii"), vertex_rows.tobytes(), face_rows.tobytes()]
    else:
        rgb = colors.astype(np.float32) / 255.0
        lines = [f"v {x:.6g} {y:.6g} {z:.6g} {r:.4g} {g:.4g} {b:.4g}"
                 for (x, y, z), (r, g, b) in zip(vertices.tolist(), rgb.tolist())]
        lines += [f"f {a} {b} {c}" for a, b, c in (faces + 1).tolist()]
        parts = [("# written by splattrain\n" + "\n".join(lines) + "\n").encode("ascii")]

    def write(handle) -> None:
        for part in parts:
            handle.write(part)

    atomic_write_bytes(path, write)


def _header_lines(path: Path) -> tuple[list[str], int]:
    """The header lines of a PLY file and the offset of its body; DataError when it has none."""
    with open(path, "rb") as handle:
        head = handle.read(_HEADER_LIMIT)
    end = head.find(b"end_header\n")
    if not head.startswith(b"ply\n") or end < 0:
        raise DataError(f"{path}: not a PLY file (no 'ply' / 'end_header' in its first {_HEADER_LIMIT} bytes)")
    return head[:end].decode("ascii", errors="replace").splitlines(), end + len(b"end_header\n")


def is_mesh_ply(path: str | Path) -> bool:
    """Whether the PLY file at ``path`` declares faces (a mesh, not Gaussians or points)."""
    lines, _ = _header_lines(Path(path))
    return any(line.split()[:2] == ["element", "face"] for line in lines)


@dataclass(frozen=True)
class _MeshLayout:
    """Where a binary mesh PLY keeps its vertices and triangles."""

    offset: int
    n_vertices: int
    vertex_type: np.dtype
    n_faces: int


_FACE_TYPE = np.dtype([("n", "u1"), ("ids", "<i4", 3)])
#: Bytes of memory a vertex and a triangle take once read (the arrays made from the rows, with
#: their temporaries), besides the rows themselves.
_VERTEX_BYTES = 64
_FACE_BYTES = 16


def _mesh_layout(path: Path) -> _MeshLayout:
    """The vertex and face layout a mesh PLY's header declares; DataError for anything else."""
    lines, offset = _header_lines(path)
    if "format binary_little_endian 1.0" not in lines:
        raise DataError(f"{path}: only binary little-endian mesh PLY files are read")
    elements: list[tuple[str, int, list[str]]] = []
    for line in lines:
        parts = line.split()
        if parts[:1] == ["element"]:
            if len(parts) != 3 or not (parts[2].isascii() and parts[2].isdigit()):
                raise DataError(f"{path}: header line '{line}' is not 'element <name> <count>'")
            elements.append((parts[1], int(parts[2]), []))
        elif parts[:1] == ["property"] and elements:
            elements[-1][2].append(line)
    names = [name for name, _, _ in elements]
    if names != ["vertex", "face"]:
        raise DataError(f"{path}: a mesh PLY has a 'vertex' then a 'face' element, this one has {names}")
    (_, n_vertices, vertex_props), (_, n_faces, face_props) = elements
    fields: list[tuple[str, str]] = []
    for line in vertex_props:
        parts = line.split()
        if len(parts) != 3 or parts[1] not in _PLY_SCALARS:
            raise DataError(f"{path}: unsupported vertex property '{line}'")
        if any(parts[2] == name for name, _ in fields):
            raise DataError(f"{path}: the vertex element has property '{parts[2]}' twice")
        fields.append((parts[2], _PLY_SCALARS[parts[1]]))
    vertex_type = np.dtype(fields)
    if not {"x", "y", "z"} <= set(vertex_type.names or ()):
        raise DataError(f"{path}: vertices need float x, y and z")
    if face_props not in (["property list uchar int vertex_indices"], ["property list uchar uint vertex_indices"]):
        raise DataError(f"{path}: faces must be 'property list uchar int vertex_indices', got {face_props}")
    return _MeshLayout(offset, n_vertices, vertex_type, n_faces)


def _mesh_colours(rows: np.ndarray, path: Path, warn: Optional[Callable[[str], None]]) -> np.ndarray:
    """uint8 [V, 3] colours from ``red green blue`` (floats in [0, 1], or integers in [0, 255]),
    grey when there are none; values outside the range (NaN: 0) are clipped, said once."""
    names = set(rows.dtype.names or ())
    if not {"red", "green", "blue"} <= names:
        return np.full((len(rows), 3), 180, dtype=np.uint8)
    colours = np.stack([rows[c].astype(np.float64) for c in ("red", "green", "blue")], axis=1)
    top = 1.0 if rows.dtype["red"].kind == "f" else 255.0
    outside = ~((colours >= 0.0) & (colours <= top))  # NaN is outside too
    if outside.any():
        colours = np.where(np.isnan(colours), 0.0, np.clip(colours, 0.0, top))
        if warn is not None:
            warn(f"{path}: {int(outside.sum()):,} vertex colour values outside [0, {top:g}] were clipped")
    return (colours * (255.0 / top) + 0.5).astype(np.uint8)


def read_mesh_ply(path: str | Path, warn: Optional[Callable[[str], None]] = None) -> MeshArrays:
    """A triangle mesh from a binary little-endian PLY: a ``vertex`` element with float ``x y z``
    (colours from ``red green blue`` when present, else grey; other scalar properties are
    skipped) and then a ``face`` element of triangles (``property list uchar int|uint
    vertex_indices``). DataError naming the file for anything else, a short file, more than the
    memory at hand (checked before anything is read) or an index out of range; colours out of
    range are clipped and ``warn`` is told once."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"mesh file '{path}' not found")
    layout = _mesh_layout(path)
    n_vertices, n_faces, row_bytes = layout.n_vertices, layout.n_faces, layout.vertex_type.itemsize
    size = path.stat().st_size
    need = layout.offset + n_vertices * row_bytes + n_faces * _FACE_TYPE.itemsize
    if size != need:
        raise DataError(f"{path}: {size} bytes, but its header declares {need} "
                        f"({n_vertices} vertices, {n_faces} triangles)")
    require_memory(f"{path} ({n_vertices:,} vertices, {n_faces:,} triangles)",
                   size + n_vertices * _VERTEX_BYTES + n_faces * _FACE_BYTES)
    rows = np.fromfile(path, dtype=layout.vertex_type, count=n_vertices, offset=layout.offset)
    face_rows = np.fromfile(path, dtype=_FACE_TYPE, count=n_faces, offset=layout.offset + n_vertices * row_bytes)
    if n_faces and (face_rows["n"] != 3).any():
        raise DataError(f"{path}: only triangles are read (a face has {int(face_rows['n'][face_rows['n'] != 3][0])} corners)")
    faces = face_rows["ids"].astype(np.int32)
    del face_rows
    if n_faces and (faces.min() < 0 or faces.max() >= n_vertices):
        raise DataError(f"{path}: a face names vertex {int(faces.max() if faces.max() >= n_vertices else faces.min())}"
                        f" of {n_vertices}")
    with np.errstate(over="ignore", invalid="ignore"):  # doubles beyond float32 become inf, refused below
        vertices = np.stack([rows[c].astype(np.float32) for c in ("x", "y", "z")], axis=1)
    if not np.isfinite(vertices).all():
        raise DataError(f"{path}: vertices hold NaN or infinite values")
    return MeshArrays(vertices, faces, _mesh_colours(rows, path, warn))
