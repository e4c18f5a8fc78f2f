"""``splattrain export``: the scene as a 3DGS PLY, a compressed PLY, an SPZ or a .splat file, or a
triangle mesh fused from its rendered depth (``--format mesh``: export_mesh.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import torch
from omegaconf import OmegaConf

from ..console import Console
from ..engine.run_folder import command_output
from ..errors import UserError
from ..io.gaussians_file import FORMATS, truncate_sh, write_gaussians_file
from ..model.transform import transform_gaussians
from .export_mesh import MeshOptions, export_mesh
from .snapshot import load_snapshot

#: What ``--format`` takes: the Gaussian file formats and ``mesh``.
EXPORT_FORMATS = (*FORMATS, "mesh")


def export(
    target: str | Path,
    console: Console,
    fmt: str = "ply",
    out: Optional[str | Path] = None,
    world_frame: Optional[str] = None,
    sh_degree: Optional[int] = None,
    imports: Sequence[str] = (),
    trust_config: bool = False,
    mesh: Optional[MeshOptions] = None,
) -> Path:
    """Write the checkpoint's Gaussians as ``fmt`` (ply, splat, spz or ply-compressed), or with
    ``fmt='mesh'`` a triangle mesh (``mesh`` holds its options; ``out`` .ply or .obj).

    ``world_frame='original'`` undoes the scene normalisation applied at load; None uses
    the run's ``export.world_frame``. ``sh_degree`` keeps SH up to that degree (default: all).
    A run trained with ``renderer.rasterize_mode: antialiased`` is marked so where the
    format has a place for it (SPZ flag, PLY header comment).
    """
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"--format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    if fmt == "mesh":
        (mesh or MeshOptions()).check(None if out is None else Path(out))
    snapshot = load_snapshot(target, "cpu", imports, trust_config)
    if world_frame is None:
        world_frame = OmegaConf.select(snapshot.cfg, "export.world_frame", default="normalized")
    if world_frame not in ("original", "normalized"):
        raise UserError(f"world frame {world_frame!r}: use 'original' or 'normalized'")
    if fmt == "mesh":
        path = _output_file(snapshot.run_dir, out, f"step_{snapshot.step:06d}_mesh.ply")
        return export_mesh(snapshot, console, path, world_frame, mesh or MeshOptions())
    exported, antialiased = snapshot.exported_scene(console.debug, console.warning)  # as rendered
    params = {key: value.detach() for key, value in exported.params.items()}
    transform = snapshot.checkpoint.get("world_transform")
    if world_frame == "original":
        if transform is None:
            console.info("the run did not normalise its scene: the normalized and original frames are the same")
        else:
            params = transform_gaussians(params, torch.linalg.inv(torch.as_tensor(transform, dtype=torch.float64)))
    if sh_degree is not None:
        params = truncate_sh(params, sh_degree)
    suffix = FORMATS[fmt]
    path = _output_file(snapshot.run_dir, out, f"step_{snapshot.step:06d}.{suffix}")
    write_gaussians_file(path, params, fmt, antialiased=antialiased)
    size = path.stat().st_size / 2**20
    n = snapshot.model.num_gaussians
    console.info(f"wrote {n} Gaussians to {path} ({fmt}, {size:.2f} MiB, {world_frame} frame)")
    return path


def _output_file(run_dir: Path, out: Optional[str | Path], name: str) -> Path:
    """``out``, or ``export/<name>`` in the run folder: the file's folders checked and made, a link
    where the file goes refused (:func:`~splattrain.engine.run_folder.command_output`)."""
    if out is not None:
        return command_output(run_dir, Path(out).parent, "").file(Path(out).name)
    return command_output(run_dir, None, "export").file(name)
