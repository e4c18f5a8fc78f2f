"""MCMC densification ops ("3D Gaussian Splatting as Markov Chain Monte Carlo", Kheradmand et al. 2024).

Relocation (Eq. 9), sampling new Gaussians and position noise in PyTorch, on any device
(gsplat computes the relocation in a CUDA kernel only); the noise in the compiled library on the
CPU when it is loaded. Each
op that changes the Gaussians' rows returns ``sources``: for every row after the op, the row
it continues, or -1 for a Gaussian the op created or re-initialised.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .ops import multinomial_sample, quat_to_rotmat, update_params_and_optimizers

#: Largest number of copies a Gaussian is split into in one relocation (gsplat's table size).
N_MAX = 51


def binomial_table(n_max: int = N_MAX) -> Tensor:
    """``table[n, k]`` = C(n, k) for 0 <= k <= n < ``n_max`` (zero above the diagonal), exact in float64."""
    table = torch.zeros(n_max, n_max, dtype=torch.float64)
    for n in range(n_max):
        for k in range(n + 1):
            table[n, k] = math.comb(n, k)
    return table


def compute_relocation(opacities: Tensor, scales: Tensor, ratios: Tensor, binoms: Tensor) -> Tuple[Tensor, Tensor]:
    """Opacity and scale of each of ``ratios`` copies that together render like the original (Eq. 9).

    ``new_opacity = 1 - (1 - o) ** (1 / n)`` and ``new_scale = o / d * scale`` with
    ``d = sum_{i=1..n} sum_{k=0..i-1} C(i-1, k) (-1)^k new_opacity^(k+1) / sqrt(k+1)``.
    The inner sums over ``i`` are cumulative sums of the binomial table's rows; the series is
    evaluated in float64 (its terms alternate in sign) and returned in the input dtype.

    Args:
        opacities: [M] in (0, 1). scales: [M, 3] (positive). ratios: [M] copies per Gaussian,
            clamped to [1, n_max]. binoms: :func:`binomial_table` ([n_max, n_max]).
    """
    n_max = binoms.shape[0]
    n = ratios.long().clamp(1, n_max)
    o = opacities.double()
    new_o = 1.0 - (1.0 - o) ** (1.0 / n.double())
    k = torch.arange(n_max, device=o.device, dtype=torch.float64)
    series = binoms.to(o.device, torch.float64).cumsum(0)[n - 1]  # [M, n_max]: sum_{i<n} C(i, k)
    series = series * (-1.0) ** k / torch.sqrt(k + 1.0) * new_o[:, None] ** (k + 1.0)
    new_scales = (o / series.sum(1))[:, None] * scales.double()
    return new_o.to(opacities.dtype), new_scales.to(scales.dtype)


@torch.no_grad()
def _respawn(
    params: Dict[str, Tensor],
    optimizers: Dict[str, torch.optim.Optimizer],
    sampled: Tensor,
    binoms: Tensor,
    min_opacity: float,
    targets: Optional[Tensor],
) -> None:
    """Share each sampled Gaussian with its copies: written over ``targets`` rows, or appended."""
    opacities = torch.sigmoid(params["opacities"])
    ratios = torch.bincount(sampled)[sampled] + 1
    new_opacities, new_scales = compute_relocation(
        opacities[sampled], torch.exp(params["scales"])[sampled], ratios, binoms
    )
    new_opacities = new_opacities.clamp(min=min_opacity, max=1.0 - torch.finfo(torch.float32).eps)

    def param_fn(name: str, p: Tensor) -> Tensor:
        if name == "opacities":
            p[sampled] = torch.logit(new_opacities)
        elif name == "scales":
            p[sampled] = torch.log(new_scales)
        if targets is None:
            return torch.nn.Parameter(torch.cat([p, p[sampled]]), requires_grad=p.requires_grad)
        p[targets] = p[sampled]
        return torch.nn.Parameter(p, requires_grad=p.requires_grad)

    def optimizer_fn(key: str, v: Tensor) -> Tensor:
        v[sampled] = 0
        if targets is None:
            return torch.cat([v, torch.zeros((len(sampled), *v.shape[1:]), device=v.device, dtype=v.dtype)])
        v[targets] = 0
        return v

    update_params_and_optimizers(param_fn, optimizer_fn, params, optimizers)


@torch.no_grad()
def relocate(
    params: Dict[str, Tensor], optimizers: Dict[str, torch.optim.Optimizer], dead: Tensor, binoms: Tensor,
    min_opacity: float,
) -> Tensor:
    """Move the ``dead`` Gaussians (bool [N]) onto live ones drawn by opacity; returns ``sources``.

    Drawn Gaussians and the dead rows that now copy them restart (source -1, Adam state zeroed).
    """
    sources = torch.arange(len(dead), device=dead.device)
    dead_rows = dead.nonzero(as_tuple=True)[0]
    alive_rows = (~dead).nonzero(as_tuple=True)[0]
    if len(dead_rows) == 0 or len(alive_rows) == 0:
        return sources
    weights = torch.sigmoid(params["opacities"]).flatten()[alive_rows]
    sampled = alive_rows[multinomial_sample(weights, len(dead_rows))]
    _respawn(params, optimizers, sampled, binoms, min_opacity, targets=dead_rows)
    sources[sampled] = -1
    sources[dead_rows] = -1
    return sources


@torch.no_grad()
def sample_add(
    params: Dict[str, Tensor], optimizers: Dict[str, torch.optim.Optimizer], n: int, binoms: Tensor,
    min_opacity: float,
) -> Tensor:
    """Append ``n`` Gaussians copied from ones drawn by opacity; returns ``sources`` (new and drawn: -1)."""
    count = len(params["means"])
    weights = torch.sigmoid(params["opacities"]).flatten()
    sampled = multinomial_sample(weights, n)
    _respawn(params, optimizers, sampled, binoms, min_opacity, targets=None)
    sources = torch.arange(count, device=sampled.device)
    sources[sampled] = -1
    return torch.cat([sources, sources.new_full((n,), -1)])


@torch.no_grad()
def inject_noise(params: Dict[str, Tensor], scale: float) -> None:
    """Move each mean by Gaussian noise shaped by its covariance, gated to nearly transparent ones.

    ``noise = Sigma * eps * sigmoid(100 * (1 - opacity - 0.995)) * scale`` with eps ~ N(0, I),
    in one pass of the compiled library when it is loaded and the tensors are float32 on the CPU.
    """
    eps = torch.randn_like(params["means"])
    if not _inject_noise_compiled(params, eps, scale):
        _inject_noise_torch(params, eps, scale)


def _inject_noise_compiled(params: Dict[str, Tensor], eps: Tensor, scale: float) -> bool:
    """The noise by the compiled library (float32 on the CPU, library loaded); False: not applicable."""
    from ..kernels.build import loaded_library
    from ..kernels.threads import loop_threads

    library = loaded_library()
    names = ("means", "quats", "scales", "opacities")
    if library is None or any(params[name].device.type != "cpu" or params[name].dtype != torch.float32
                              for name in names) or not params["means"].is_contiguous():
        return False
    quats, scales, logits = (params[name].detach().contiguous() for name in names[1:])
    library.handle.splat_mcmc_noise_f32(
        params["means"].data_ptr(), quats.data_ptr(), scales.data_ptr(), logits.data_ptr(), eps.data_ptr(),
        len(eps), scale, loop_threads(),
    )
    return True


def _inject_noise_torch(params: Dict[str, Tensor], eps: Tensor, scale: float) -> None:
    """The noise in PyTorch, on any device."""
    opacities = torch.sigmoid(params["opacities"].flatten())
    rotations = quat_to_rotmat(F.normalize(params["quats"], dim=-1))
    factor = rotations * torch.exp(params["scales"])[:, None, :]  # R S
    covariances = factor @ factor.transpose(1, 2)
    gate = torch.sigmoid(100.0 * ((1.0 - opacities) - 0.995))
    noise = eps * gate[:, None] * scale
    params["means"].add_(torch.einsum("nij,nj->ni", covariances, noise))
