"""Apply a similarity transform (scale, rotation, translation) to Gaussians, SH included."""

from __future__ import annotations

from typing import Dict

import torch
from torch import Tensor

from .sh import eval_sh_bases


def _quat_from_matrix(R: Tensor) -> Tensor:
    """wxyz unit quaternion of a rotation matrix [3, 3]."""
    m = R.double()
    trace = m.trace()
    if trace > 0:
        s = torch.sqrt(trace + 1.0) * 2
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = torch.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] > m[2, 2]:
        s = torch.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = torch.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    return torch.stack(q).float()


def _quat_multiply(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product of wxyz quaternions (broadcasting)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def sh_rotation_matrices(R: Tensor, degree: int, samples: int = 64) -> list[Tensor]:
    """Per SH band l = 1..degree, the [2l+1, 2l+1] matrix M with coeffs' = M @ coeffs under rotation R.

    Found by least squares on sampled directions: the rotated function f'(d) = f(R^T d).
    """
    generator = torch.Generator().manual_seed(0)
    dirs = torch.nn.functional.normalize(torch.randn(samples, 3, generator=generator, dtype=torch.float64), dim=1)
    basis = eval_sh_bases((degree + 1) ** 2, dirs)
    basis_rotated = eval_sh_bases((degree + 1) ** 2, dirs @ R.double())  # rows are R^T d
    matrices = []
    for band in range(1, degree + 1):
        band_slice = slice(band * band, (band + 1) ** 2)
        solution = torch.linalg.lstsq(basis[:, band_slice], basis_rotated[:, band_slice]).solution
        matrices.append(solution.float())
    return matrices


def transform_gaussians(params: Dict[str, Tensor], matrix: Tensor) -> Dict[str, Tensor]:
    """Raw parameters mapped by the similarity ``matrix`` [4, 4] = [s R | t].

    Means go to s R x + t, log-scales shift by log s, rotations compose with R, and
    view-dependent colour (SH bands 1..3) rotates with R.
    """
    matrix = matrix.double()
    linear = matrix[:3, :3]
    scale = torch.linalg.det(linear).abs() ** (1.0 / 3.0)
    R = (linear / scale).float()
    t = matrix[:3, 3].float()
    s = float(scale)
    with torch.no_grad():
        out = {key: value.detach().clone() for key, value in params.items()}
        out["means"] = params["means"].detach() @ (s * R).T + t
        out["scales"] = params["scales"].detach() + torch.log(torch.tensor(s))
        out["quats"] = _quat_multiply(_quat_from_matrix(R), params["quats"].detach())
        shN = params["shN"].detach()
        degree = int(round((shN.shape[1] + 1) ** 0.5)) - 1
        if degree > 0:
            rotated = []
            for band, M in enumerate(sh_rotation_matrices(R, degree), start=1):
                coeffs = shN[:, band * band - 1 : (band + 1) ** 2 - 1, :]  # [N, 2l+1, 3]
                rotated.append(torch.einsum("ij,njc->nic", M, coeffs))
            out["shN"] = torch.cat(rotated, dim=1)
    return out
