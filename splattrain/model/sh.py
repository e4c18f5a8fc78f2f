"""Real spherical harmonics up to degree 4, in the basis order and sign convention of 3DGS.

The closed forms follow Sloan, "Efficient Spherical Harmonic Evaluation" (JCGT 2013), the
evaluation every 3DGS renderer uses, so colours match gsplat's and the original code's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

MAX_SH_DEGREE = 4


def eval_sh_bases(num_bases: int, dirs: Tensor) -> Tensor:
    """The first ``num_bases`` (1, 4, 9, 16 or 25) SH basis functions at unit directions [..., 3]."""
    out = torch.empty((*dirs.shape[:-1], num_bases), dtype=dirs.dtype, device=dirs.device)
    out[..., 0] = 0.2820947917738781
    if num_bases <= 1:
        return out
    x, y, z = dirs.unbind(-1)
    a = -0.48860251190292
    out[..., 1] = a * y
    out[..., 2] = -a * z
    out[..., 3] = a * x
    if num_bases <= 4:
        return out
    z2 = z * z
    b = -1.092548430592079 * z
    a = 0.5462742152960395
    c1 = x * x - y * y
    s1 = 2 * x * y
    out[..., 4] = a * s1
    out[..., 5] = b * y
    out[..., 6] = 0.9461746957575601 * z2 - 0.3153915652525201
    out[..., 7] = b * x
    out[..., 8] = a * c1
    if num_bases <= 9:
        return out
    c = -2.285228997322329 * z2 + 0.4570457994644658
    b = 1.445305721320277 * z
    a = -0.5900435899266435
    c2 = x * c1 - y * s1
    s2 = x * s1 + y * c1
    out[..., 9] = a * s2
    out[..., 10] = b * s1
    out[..., 11] = c * y
    out[..., 12] = z * (1.865881662950577 * z2 - 1.119528997770346)
    out[..., 13] = c * x
    out[..., 14] = b * c1
    out[..., 15] = a * c2
    if num_bases <= 16:
        return out
    d = z * (-4.683325804901025 * z2 + 2.007139630671868)
    c = 3.31161143515146 * z2 - 0.47308734787878
    b = -1.770130769779931 * z
    a = 0.6258357354491763
    c3 = x * c2 - y * s2
    s3 = x * s2 + y * c2
    out[..., 16] = a * s3
    out[..., 17] = b * s2
    out[..., 18] = c * s1
    out[..., 19] = d * y
    out[..., 20] = 1.984313483298443 * z2 * (1.865881662950577 * z2 - 1.119528997770346) + \
        -1.006230589874905 * (0.9461746957575601 * z2 - 0.3153915652525201)
    out[..., 21] = d * x
    out[..., 22] = c * c1
    out[..., 23] = b * c2
    out[..., 24] = a * c3
    return out


def spherical_harmonics(degree: int, dirs: Tensor, coeffs: Tensor) -> Tensor:
    """Colours [..., 3] of SH ``coeffs`` [..., K, 3] up to ``degree`` seen along ``dirs`` [..., 3]
    (normalised here; the bases above ``degree`` are ignored)."""
    if not 0 <= degree <= MAX_SH_DEGREE or (degree + 1) ** 2 > coeffs.shape[-2]:
        raise ValueError(f"SH degree {degree} needs {(degree + 1) ** 2} coefficients, got {coeffs.shape[-2]}")
    num_bases = (degree + 1) ** 2
    bases = torch.zeros_like(coeffs[..., 0])
    bases[..., :num_bases] = eval_sh_bases(num_bases, F.normalize(dirs, p=2, dim=-1))
    return (bases[..., None] * coeffs).sum(dim=-2)
