"""Densification ops on Gaussian parameters and their Adam state: duplicate, split, remove, append,
reset opacities, and the shared machinery to rewrite a parameter together with its optimizer state.

Every op edits ``params`` (a dict or ParameterDict of [N, ...] tensors, one per group) in place,
replaces each optimizer's parameter with the new one and rewrites its per-row state (Adam's
``exp_avg`` / ``exp_avg_sq``), and applies the same row change to every tensor in ``state`` (the
strategy's per-Gaussian statistics). The math follows the 3DGS paper as gsplat implements it,
so results match gsplat's ``DefaultStrategy`` step for step.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Mapping, MutableMapping, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

Params = MutableMapping[str, Tensor]
Optimizers = Dict[str, torch.optim.Optimizer]


def quat_to_rotmat(quats: Tensor) -> Tensor:
    """Rotation matrices [N, 3, 3] of unit quaternions [N, 4] in wxyz order."""
    w, x, y, z = quats.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y**2 + z**2), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x**2 + z**2), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x**2 + y**2),
        ],
        dim=-1,
    ).reshape(quats.shape[:-1] + (3, 3))


@torch.no_grad()
def update_params_and_optimizers(
    param_fn: Callable[[str, Tensor], Tensor],
    optimizer_fn: Callable[[str, Tensor], Tensor],
    params: Params,
    optimizers: Optimizers,
    names: Optional[Iterable[str]] = None,
) -> None:
    """Replace each parameter ``name`` by ``param_fn(name, param)`` and each of its optimizer's
    per-row state tensors ``v`` (all keys but ``step``) by ``optimizer_fn(key, v)``."""
    for name in list(params.keys()) if names is None else names:
        param = params[name]
        new_param = param_fn(name, param)
        params[name] = new_param
        optimizer = optimizers.get(name)
        if optimizer is None:
            continue
        for group in optimizer.param_groups:
            param_state = optimizer.state.pop(param, {})
            for key in list(param_state):
                if key != "step":
                    param_state[key] = optimizer_fn(key, param_state[key])
            group["params"] = [new_param]
            optimizer.state[new_param] = param_state


def _new_param(value: Tensor, like: Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(value, requires_grad=like.requires_grad)


def _zeros(n: int, like: Tensor) -> Tensor:
    return torch.zeros((n, *like.shape[1:]), device=like.device, dtype=like.dtype)


@torch.no_grad()
def duplicate(params: Params, optimizers: Optimizers, state: Dict[str, object], mask: Tensor) -> None:
    """Append a copy of every Gaussian where ``mask`` is True (its Adam state starts at zero)."""
    sel = torch.where(mask)[0]
    update_params_and_optimizers(
        lambda name, p: _new_param(torch.cat([p, p[sel]]), p),
        lambda key, v: torch.cat([v, _zeros(len(sel), v)]),
        params, optimizers,
    )
    for key, value in state.items():
        if isinstance(value, Tensor):
            state[key] = torch.cat((value, value[sel]))


@torch.no_grad()
def split(
    params: Params, optimizers: Optimizers, state: Dict[str, object], mask: Tensor, revised_opacity: bool = False
) -> None:
    """Replace every Gaussian where ``mask`` is True by two, drawn inside it and 1.6x smaller.

    The kept Gaussians come first, in order, then the pairs. ``revised_opacity`` gives each half
    the opacity ``1 - sqrt(1 - o)`` (Rota Bulo et al. 2024) instead of the original's.
    """
    sel = torch.where(mask)[0]
    rest = torch.where(~mask)[0]
    scales = torch.exp(params["scales"][sel])
    rotmats = quat_to_rotmat(F.normalize(params["quats"][sel], dim=-1))
    noise = torch.randn(2, len(scales), 3, device=mask.device)
    samples = torch.einsum("nij,nj,bnj->bni", rotmats, scales, noise)  # [2, M, 3]

    def param_fn(name: str, p: Tensor) -> Tensor:
        repeats = [2] + [1] * (p.dim() - 1)
        if name == "means":
            halves = (p[sel] + samples).reshape(-1, 3)
        elif name == "scales":
            halves = torch.log(scales / 1.6).repeat(2, 1)
        elif name == "opacities" and revised_opacity:
            halves = torch.logit(1.0 - torch.sqrt(1.0 - torch.sigmoid(p[sel]))).repeat(repeats)
        else:
            halves = p[sel].repeat(repeats)
        return _new_param(torch.cat([p[rest], halves]), p)

    update_params_and_optimizers(
        param_fn, lambda key, v: torch.cat([v[rest], _zeros(2 * len(sel), v)]), params, optimizers
    )
    for key, value in state.items():
        if isinstance(value, Tensor):
            state[key] = torch.cat((value[rest], value[sel].repeat([2] + [1] * (value.dim() - 1))))


@torch.no_grad()
def remove(params: Params, optimizers: Optimizers, state: Dict[str, object], mask: Tensor) -> None:
    """Drop every Gaussian where ``mask`` is True, with its optimizer and strategy state."""
    keep = torch.where(~mask)[0]
    update_params_and_optimizers(lambda name, p: _new_param(p[keep], p), lambda key, v: v[keep], params, optimizers)
    for key, value in state.items():
        if isinstance(value, Tensor):
            state[key] = value[keep]


def check_new_rows(params: Params, values: Mapping[str, Tensor]) -> int:
    """The number of new Gaussians ``values`` describes (see :func:`append`); ValueError naming
    what does not fit ``params``."""
    missing = [name for name in params.keys() if name not in values]
    if missing:
        raise ValueError(f"new Gaussians need a value for every parameter; missing: {', '.join(missing)}")
    for name in params.keys():
        value = values[name]
        if not isinstance(value, Tensor) or tuple(value.shape[1:]) != tuple(params[name].shape[1:]):
            shape = list(value.shape[1:]) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"new Gaussians' '{name}' has rows of shape {shape}, the parameter "
                             f"{list(params[name].shape[1:])}")
    counts = sorted({len(values[name]) for name in params.keys()})
    if len(counts) != 1:
        raise ValueError(f"new Gaussians' parameters have different row counts: {counts}")
    return counts[0]


@torch.no_grad()
def append(params: Params, optimizers: Optimizers, state: Dict[str, object], values: Mapping[str, Tensor]) -> None:
    """Append new Gaussians after the others: ``values[name]`` [M, ...] for every parameter (their
    Adam state starts at zero; every tensor of ``state`` gets M rows of zeros). ValueError when a
    parameter is missing or its rows do not fit."""
    n = check_new_rows(params, values)
    update_params_and_optimizers(
        lambda name, p: _new_param(torch.cat([p, values[name].detach().to(p.device, p.dtype)]), p),
        lambda key, v: torch.cat([v, _zeros(n, v)]),
        params, optimizers,
    )
    for key, value in state.items():
        if isinstance(value, Tensor):
            state[key] = torch.cat((value, _zeros(n, value)))


@torch.no_grad()
def reset_opacity(params: Params, optimizers: Optimizers, value: float) -> None:
    """Clamp every opacity to at most ``value`` (after the sigmoid) and zero its Adam state."""
    ceiling = torch.logit(torch.tensor(value)).item()
    update_params_and_optimizers(
        lambda name, p: _new_param(torch.clamp(p, max=ceiling), p),
        lambda key, v: torch.zeros_like(v),
        params, optimizers, names=["opacities"],
    )


@torch.no_grad()
def multinomial_sample(weights: Tensor, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
    """``n`` indices drawn with replacement in proportion to ``weights`` [M]; beyond the 2^24
    categories ``torch.multinomial`` takes, inverse-CDF sampling on the same device."""
    if weights.numel() <= 2**24:
        return torch.multinomial(weights, n, replacement=True, generator=generator)
    cdf = torch.cumsum(weights.double(), 0)
    draws = torch.rand(n, device=weights.device, dtype=torch.float64, generator=generator) * cdf[-1]
    return torch.searchsorted(cdf, draws).clamp_max(weights.numel() - 1)
