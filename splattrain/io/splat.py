"""The compact ``.splat`` format read by web splat viewers (32 bytes per Gaussian)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import torch
from torch import Tensor

from ..model.gaussians import SH_C0
from .atomic import atomic_write_bytes


def gaussians_to_splat_bytes(params: Dict[str, Tensor]) -> bytes:
    """Pack Gaussians as .splat records, most visible first.

    Each record: position 3 x float32, scale 3 x float32 (linear), RGBA 4 x uint8 (base
    colour from the degree-0 SH, alpha = opacity), rotation 4 x uint8 (normalised wxyz
    quaternion mapped from [-1, 1] to [0, 255]).
    """
    with torch.no_grad():
        means = params["means"].float().cpu()
        scales = torch.exp(params["scales"].float().cpu())
        opacity = torch.sigmoid(params["opacities"].float().cpu())
        rgb = 0.5 + SH_C0 * params["sh0"].float().cpu().reshape(-1, 3)
        quats = torch.nn.functional.normalize(params["quats"].float().cpu(), dim=-1)
        order = torch.argsort(-(scales.prod(dim=1) * opacity), stable=True)
        n = means.shape[0]
        record = np.zeros(n, dtype=[("pos", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rot", "u1", 4)])
        record["pos"] = means[order].numpy()
        record["scale"] = scales[order].numpy()
        rgba = torch.cat([rgb, opacity[:, None]], dim=1)[order]
        record["rgba"] = (rgba.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        record["rot"] = (quats[order] * 128 + 128).round().clamp(0, 255).to(torch.uint8).numpy()
    return record.tobytes()


def write_splat(path: str | Path, params: Dict[str, Tensor]) -> None:
    """Write ``path`` in the .splat format, atomically."""
    blob = gaussians_to_splat_bytes(params)
    atomic_write_bytes(path, lambda handle: handle.write(blob))
