"""The compact ``.splat`` format read by web splat viewers (32 bytes per Gaussian)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import torch
from torch import Tensor

from ..model.gaussians import SH_C0
from .atomic import atomic_write_bytes
from .limits import require_finite


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


_RECORD = np.dtype([("pos", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rot", "u1", 4)])
_MAX_LOGIT = 12.0


def read_splat(path: str | Path) -> Dict[str, Tensor]:
    """Raw parameters (SH degree 0) from a .splat file (the inverse of :func:`gaussians_to_splat_bytes`)."""
    from ..errors import DataError

    path = Path(path)
    raw = path.read_bytes()
    if len(raw) % _RECORD.itemsize:
        raise DataError(f"{path}: {len(raw)} bytes is not a whole number of 32-byte .splat records")
    record = np.frombuffer(raw, dtype=_RECORD)
    n = len(record)
    rgba = record["rgba"].astype(np.float32) / 255.0
    alpha = np.clip(rgba[:, 3].astype(np.float64), 1e-12, 1.0 - 1e-12)
    quats = (record["rot"].astype(np.float32) - 128.0) / 128.0
    params = {
        "means": torch.from_numpy(record["pos"].astype(np.float32)),
        "scales": torch.from_numpy(np.log(np.maximum(record["scale"], 1e-30)).astype(np.float32)),
        "quats": torch.from_numpy(quats),
        "opacities": torch.from_numpy(np.clip(np.log(alpha / (1 - alpha)), -_MAX_LOGIT, _MAX_LOGIT).astype(np.float32)),
        "sh0": torch.from_numpy(((rgba[:, :3] - 0.5) / SH_C0).astype(np.float32)).reshape(n, 1, 3),
        "shN": torch.zeros(n, 0, 3),
    }
    require_finite(params, str(path))
    return params
