"""Surfaces from a trained scene: TSDF fusion of rendered depth (Open3D, the ``mesh`` extra) and
triangle-mesh files (PLY with vertex colours, OBJ)."""

from .files import MeshArrays, is_mesh_ply, read_mesh_ply, write_mesh
from .fusion import FusionSettings, TsdfFusion, default_settings, keep_largest_components
from .open3d_backend import MeshExtraMissing, import_open3d

__all__ = [
    "FusionSettings", "MeshArrays", "MeshExtraMissing", "TsdfFusion", "default_settings", "import_open3d",
    "is_mesh_ply", "keep_largest_components", "read_mesh_ply", "write_mesh",
]
