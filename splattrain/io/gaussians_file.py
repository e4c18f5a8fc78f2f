"""Every Gaussian scene format splattrain writes and reads: one entry point for each direction."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, NamedTuple, Tuple

from torch import Tensor

from ..errors import DataError, UserError
from .compressed_ply import compressed_ply_to_gaussians, is_compressed_ply, write_compressed_ply
from .ply import ANTIALIASED_COMMENT, read_ply, vertices_to_gaussians, write_ply
from .splat import read_splat, write_splat
from .spz import read_spz, write_spz

#: Export formats and the file extension each one is written with.
FORMATS = {"ply": "ply", "splat": "splat", "spz": "spz", "ply-compressed": "compressed.ply"}


class GaussiansFile(NamedTuple):
    """What a scene file holds: raw parameters, SH degree and whether it was trained antialiased."""

    params: Dict[str, Tensor]
    sh_degree: int
    antialiased: bool


def truncate_sh(params: Dict[str, Tensor], degree: int) -> Dict[str, Tensor]:
    """``params`` with the higher-order SH cut to ``degree`` (an error when they have fewer)."""
    have = params["shN"].shape[1]
    keep = (degree + 1) ** 2 - 1
    if degree < 0 or keep > have:
        current = int(round((have + 1) ** 0.5)) - 1
        raise UserError(f"--sh-degree {degree}: the scene has SH degree {current}; use 0..{current}")
    return {**params, "shN": params["shN"][:, :keep]}


def write_gaussians_file(path: str | Path, params: Dict[str, Tensor], fmt: str, antialiased: bool = False) -> None:
    """Write ``params`` as ``fmt`` (a key of FORMATS); .splat keeps only the base colour."""
    if fmt == "ply":
        write_ply(path, params, antialiased=antialiased)
    elif fmt == "ply-compressed":
        write_compressed_ply(path, params, antialiased=antialiased)
    elif fmt == "spz":
        write_spz(path, params, antialiased=antialiased)
    elif fmt == "splat":
        write_splat(path, params)
    else:
        raise UserError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")


def read_gaussians_file_full(path: str | Path) -> GaussiansFile:
    """Read a standard 3DGS PLY, a compressed PLY, an SPZ or a .splat file (told apart by content)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"scene file '{path}' not found")
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head == b"ply\n":
        ply = read_ply(path)
        antialiased = ANTIALIASED_COMMENT in ply.comments
        if is_compressed_ply(ply):
            params, degree = compressed_ply_to_gaussians(ply, str(path))
        elif "vertex" in ply.elements:
            params, degree = vertices_to_gaussians(ply.elements["vertex"], path)
        else:
            raise DataError(f"{path}: a PLY without a 'vertex' element")
        return GaussiansFile(params, degree, antialiased)
    if head[:2] == b"\x1f\x8b" or head == b"NGSP":  # SPZ: gzip (versions 2, 3) or version 4
        return GaussiansFile(*read_spz(path))
    if path.suffix.lower() == ".splat":
        return GaussiansFile(read_splat(path), 0, False)
    raise DataError(f"{path}: not a PLY, compressed PLY, SPZ or .splat file")


def read_gaussians_file(path: str | Path) -> Tuple[Dict[str, Tensor], int]:
    """Raw parameters and SH degree from any format :func:`read_gaussians_file_full` reads."""
    scene = read_gaussians_file_full(path)
    return scene.params, scene.sh_degree


__all__ = ["FORMATS", "GaussiansFile", "read_gaussians_file", "read_gaussians_file_full", "truncate_sh",
           "write_gaussians_file"]
