"""Densification strategies built from gsplat's: the 3DGS default (clone / split / prune) and MCMC.

Both strategies tell listeners how the Gaussians' rows move (:meth:`ReindexEvents.add_reindex_listener`),
so hooks keeping per-Gaussian tensors (EMA weights) follow clones, splits, prunes and relocations.
The trainer calls ``step_pre_backward`` per rendered batch, then :meth:`post_backward` once per
step with the ``info`` of every batch rendered in it, and adds :meth:`regularization` to the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from gsplat.strategy import DefaultStrategy, MCMCStrategy
from gsplat.strategy.ops import duplicate, remove, reset_opa, split
from torch import Tensor

from . import mcmc
from .errors import ConfigError

#: Called with ``sources`` (LongTensor [N_new]: the row each Gaussian continues, -1 for one that was
#: created or re-initialised and starts from its current values) and the parameters after the change.
ReindexListener = Callable[[Tensor, Mapping[str, Tensor]], None]


class ReindexEvents:
    """Mixin: the listeners told about every change of the Gaussians' rows."""

    def add_reindex_listener(self, listener: ReindexListener) -> None:
        """Call ``listener(sources, params)`` after every op that moves, adds or removes Gaussians."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def _reindexed(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        for listener in self._listeners:
            listener(sources, params)

    def remove_gaussians(self, params, optimizers, state: Dict[str, Any], mask: Tensor) -> None:
        """Remove the Gaussians where ``mask`` is True, with their optimizer and strategy state,
        and tell the listeners: the way for hooks to drop Gaussians outside densification."""
        remove(params=params, optimizers=optimizers, state=self._per_gaussian(state), mask=mask)
        self._reindexed((~mask).nonzero(as_tuple=True)[0], params)

    def _per_gaussian(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The part of ``state`` with one row per Gaussian (gsplat's ops index every tensor in it)."""
        return state


@dataclass
class SplatDefaultStrategy(DefaultStrategy, ReindexEvents):
    """gsplat's DefaultStrategy (clone / split / prune) with the opacity reset enforced, a cap on
    the number of Gaussians, and reindex events.

    gsplat 1.5.3 tests ``step % reset_every == 0 & step > 0``, which Python reads as a
    chained comparison that is never true, so opacities are never reset. The reset here
    follows the 3DGS paper (every ``reset_every`` steps while refining); it is idempotent,
    so a gsplat that resets as well changes nothing. With ``max_gaussians`` > 0, growth stops
    at the cap: the candidates with the largest image-plane gradients are cloned or split first.
    """

    max_gaussians: int = 0

    def __post_init__(self) -> None:
        self._listeners: List[ReindexListener] = []

    def post_backward(self, params, optimizers, state: Dict[str, Any], step: int, infos: List[Dict[str, Any]]) -> None:
        """Add every rendered batch's gradients to the statistics, then densify as gsplat does."""
        if step < self.refine_stop_iter:
            for info in infos[:-1]:
                self._update_state(params, state, info)
        self.step_post_backward(params, optimizers, state, step, infos[-1])

    def step_post_backward(
        self, params, optimizers, state: Dict[str, Any], step: int, info: Dict[str, Any], packed: bool = False
    ) -> None:
        super().step_post_backward(params, optimizers, state, step, info, packed=packed)
        if 0 < step < self.refine_stop_iter and step % self.reset_every == 0:
            reset_opa(params=params, optimizers=optimizers, state=state, value=self.prune_opa * 2.0)

    def regularization(self, params: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        """Loss terms this strategy adds (none)."""
        return {}

    @torch.no_grad()
    def _grow_gs(self, params, optimizers, state: Dict[str, Any], step: int) -> Tuple[int, int]:
        """gsplat's clone and split rules, within the cap, reporting the new rows."""
        grads = state["grad2d"] / state["count"].clamp_min(1)
        is_grad_high = grads > self.grow_grad2d
        is_small = torch.exp(params["scales"]).max(dim=-1).values <= self.grow_scale3d * state["scene_scale"]
        is_dupli = is_grad_high & is_small
        is_split = is_grad_high & ~is_small
        if step < self.refine_scale2d_stop_iter:
            is_split |= state["radii"] > self.grow_scale2d
        is_dupli, is_split = self._within_cap(is_dupli, is_split, grads)
        count = len(grads)
        n_dupli, n_split = int(is_dupli.sum()), int(is_split.sum())
        rows = torch.arange(count, device=grads.device)
        if n_dupli > 0:
            duplicate(params=params, optimizers=optimizers, state=state, mask=is_dupli)
            self._reindexed(torch.cat([rows, rows.new_full((n_dupli,), -1)]), params)
            is_split = torch.cat([is_split, is_split.new_zeros(n_dupli)])  # clones are not split
        if n_split > 0:
            split(
                params=params, optimizers=optimizers, state=state, mask=is_split, revised_opacity=self.revised_opacity
            )
            kept = (~is_split).nonzero(as_tuple=True)[0]
            self._reindexed(torch.cat([kept, kept.new_full((2 * n_split,), -1)]), params)
        return n_dupli, n_split

    def _within_cap(self, is_dupli: Tensor, is_split: Tensor, grads: Tensor) -> Tuple[Tensor, Tensor]:
        """Keep the candidates with the largest gradients that fit under ``max_gaussians``."""
        if self.max_gaussians <= 0:
            return is_dupli, is_split
        candidates = is_dupli | is_split
        budget = max(self.max_gaussians - len(grads), 0)  # clone and split both add one Gaussian
        if int(candidates.sum()) <= budget:
            return is_dupli, is_split
        ranked = torch.where(candidates, grads, torch.full_like(grads, -torch.inf))
        keep = torch.zeros_like(candidates)
        keep[torch.argsort(ranked, descending=True, stable=True)[:budget]] = True
        return is_dupli & keep, is_split & keep

    @torch.no_grad()
    def _prune_gs(self, params, optimizers, state: Dict[str, Any], step: int) -> int:
        """gsplat's prune rules, reporting the rows kept."""
        is_prune = torch.sigmoid(params["opacities"].flatten()) < self.prune_opa
        if step > self.reset_every:
            is_prune |= torch.exp(params["scales"]).max(dim=-1).values > self.prune_scale3d * state["scene_scale"]
            if step < self.refine_scale2d_stop_iter:
                is_prune |= state["radii"] > self.prune_scale2d
        n_prune = int(is_prune.sum())
        if n_prune > 0:
            self.remove_gaussians(params, optimizers, state, is_prune)
        return n_prune


@dataclass
class SplatMCMCStrategy(MCMCStrategy, ReindexEvents):
    """gsplat's MCMCStrategy on any device (PyTorch relocation, :mod:`splattrain.mcmc`), with the
    paper's opacity and scale regularisers and reindex events.

    Every ``refine_every`` steps between ``refine_start_iter`` and ``refine_stop_iter``, Gaussians
    with opacity <= ``min_opacity`` move onto live ones drawn by opacity, then 5% more are added,
    up to ``cap_max``. Every step, nearly transparent Gaussians get position noise scaled by the
    current means learning rate times ``noise_lr``.
    """

    opacity_reg: float = 0.01
    scale_reg: float = 0.01

    def __post_init__(self) -> None:
        self._listeners: List[ReindexListener] = []

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        """The binomial table of Eq. 9 (``scene_scale`` is unused: MCMC does not look at sizes)."""
        return {"binoms": mcmc.binomial_table()}

    def _per_gaussian(self, state: Dict[str, Any]) -> Dict[str, Any]:
        return {}  # the binomial table is not per Gaussian

    def post_backward(self, params, optimizers, state: Dict[str, Any], step: int, infos: List[Dict[str, Any]]) -> None:
        """Relocate and add Gaussians when due, then add position noise at the current means rate."""
        lr = optimizers["means"].param_groups[0]["lr"]
        self.step_post_backward(params, optimizers, state, step, infos[-1], lr=lr)

    def step_post_backward(
        self, params, optimizers, state: Dict[str, Any], step: int, info: Dict[str, Any], lr: float
    ) -> None:
        state["binoms"] = binoms = state["binoms"].to(params["means"].device)
        if self.refine_start_iter < step < self.refine_stop_iter and step % self.refine_every == 0:
            dead = torch.sigmoid(params["opacities"].flatten()) <= self.min_opacity
            if dead.any():
                self._reindexed(mcmc.relocate(params, optimizers, dead, binoms, self.min_opacity), params)
            count = len(params["means"])
            n_new = min(self.cap_max, int(1.05 * count)) - count
            if n_new > 0:
                self._reindexed(mcmc.sample_add(params, optimizers, n_new, binoms, self.min_opacity), params)
        mcmc.inject_noise(params, lr * self.noise_lr)

    def regularization(self, params: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        """``opacity_reg`` x mean opacity and ``scale_reg`` x mean scale (the terms with weight > 0)."""
        terms = {}
        if self.opacity_reg > 0:
            terms["opacity_reg"] = self.opacity_reg * torch.sigmoid(params["opacities"]).mean()
        if self.scale_reg > 0:
            terms["scale_reg"] = self.scale_reg * torch.exp(params["scales"]).mean()
        return terms


#: Config keys that only one strategy type reads.
_ONLY_FOR = {
    "default": (
        "grow_grad2d", "grow_scale3d", "grow_scale2d", "prune_scale3d", "prune_scale2d", "refine_scale2d_stop_iter",
        "reset_every", "pause_refine_after_reset", "absgrad", "revised_opacity",
    ),
    "mcmc": ("noise_lr", "opacity_reg", "scale_reg"),
}


def build_strategy(
    strategy_cfg, renderer: object, warn: Optional[Callable[[str], None]] = None
) -> SplatDefaultStrategy | SplatMCMCStrategy:
    """The densification strategy named by ``strategy.type``, checked against ``renderer``.

    Keys set away from their defaults that the chosen type does not read are named to ``warn``.
    """
    from .config.schema import StrategyConfig

    options = dict(strategy_cfg)
    kind = options.pop("type")
    if kind not in _ONLY_FOR:
        raise ConfigError(f"strategy.type {kind!r} is not known; use {' or '.join(_ONLY_FOR)}")
    defaults = {f.name: f.default for f in fields(StrategyConfig)}
    ignored = [key for other, keys in _ONLY_FOR.items() if other != kind for key in keys if key in options]
    changed = [f"{key}={options[key]}" for key in ignored if options[key] != defaults[key]]
    if changed and warn is not None:
        warn(f"strategy.type {kind} ignores strategy.{', strategy.'.join(changed)}")
    for key in ignored:
        del options[key]
    if options["max_gaussians"] < 0:
        raise ConfigError("strategy.max_gaussians must be >= 0 (0: no cap)")
    if kind == "mcmc":
        return _build_mcmc(options)
    if strategy_cfg.absgrad and not getattr(renderer, "supports_absgrad", False):
        raise ConfigError(
            f"strategy.absgrad needs a renderer that computes absolute gradients; "
            f"{type(renderer).__name__} does not (use renderer.type torch or gsplat, or set strategy.absgrad false)"
        )
    return SplatDefaultStrategy(verbose=False, **options)


def _build_mcmc(options: Dict[str, Any]) -> SplatMCMCStrategy:
    if options["max_gaussians"] <= 0:
        raise ConfigError("strategy.type mcmc needs strategy.max_gaussians > 0 (the number of Gaussians it grows to)")
    return SplatMCMCStrategy(
        cap_max=options["max_gaussians"],
        noise_lr=options["noise_lr"],
        refine_start_iter=options["refine_start_iter"],
        refine_stop_iter=options["refine_stop_iter"],
        refine_every=options["refine_every"],
        min_opacity=options["prune_opa"],
        opacity_reg=options["opacity_reg"],
        scale_reg=options["scale_reg"],
        verbose=False,
    )
