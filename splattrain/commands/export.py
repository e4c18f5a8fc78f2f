"""``splattrain export``: the scene as a standard 3DGS PLY or a compact .splat file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
from omegaconf import OmegaConf

from ..console import Console
from ..errors import UserError
from ..io.ply import write_ply
from ..io.splat import write_splat
from ..model.transform import transform_gaussians
from .snapshot import load_snapshot

FORMATS = ("ply", "splat")


def export(
    target: str | Path,
    console: Console,
    fmt: str = "ply",
    out: Optional[str | Path] = None,
    world_frame: Optional[str] = None,
) -> Path:
    """Write the checkpoint's Gaussians as ``fmt``.

    ``world_frame='original'`` undoes the scene normalisation applied at load; None uses
    the run's ``export.world_frame``.
    """
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    snapshot = load_snapshot(target, "cpu")
    if world_frame is None:
        world_frame = OmegaConf.select(snapshot.cfg, "export.world_frame", default="normalized")
    if world_frame not in ("original", "normalized"):
        raise UserError(f"world frame {world_frame!r}: use 'original' or 'normalized'")
    params = {key: value.detach() for key, value in snapshot.model.params.items()}
    transform = snapshot.checkpoint.get("world_transform")
    if world_frame == "original":
        if transform is None:
            console.info("the run did not normalise its scene: the normalized and original frames are the same")
        else:
            params = transform_gaussians(params, torch.linalg.inv(torch.as_tensor(transform, dtype=torch.float64)))
    path = Path(out) if out is not None else snapshot.run_dir / "export" / f"step_{snapshot.step:06d}.{fmt}"
    (write_ply if fmt == "ply" else write_splat)(path, params)
    console.info(f"wrote {snapshot.model.num_gaussians} Gaussians to {path} ({fmt}, {world_frame} frame)")
    return path
