"""Densification strategies built from gsplat's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

from gsplat.strategy import DefaultStrategy
from gsplat.strategy.ops import reset_opa

from .errors import ConfigError


@dataclass
class SplatDefaultStrategy(DefaultStrategy):
    """gsplat's DefaultStrategy (clone / split / prune) with the periodic opacity reset enforced.

    gsplat 1.5.3 tests ``step % reset_every == 0 & step > 0``, which Python reads as a
    chained comparison that is never true, so opacities are never reset. The reset here
    follows the 3DGS paper (every ``reset_every`` steps while refining); it is idempotent,
    so a gsplat that resets as well changes nothing.
    """

    def step_post_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Dict[str, Any], packed: bool = False) -> None:
        super().step_post_backward(params, optimizers, state, step, info, packed=packed)
        if 0 < step < self.refine_stop_iter and step % self.reset_every == 0:
            reset_opa(params=params, optimizers=optimizers, state=state, value=self.prune_opa * 2.0)


def build_strategy(strategy_cfg, renderer: object) -> DefaultStrategy:
    """The densification strategy named by ``strategy.type``, checked against ``renderer``."""
    options = {k: v for k, v in dict(strategy_cfg).items() if k != "type"}
    if strategy_cfg.type != "default":
        raise ConfigError(f"strategy.type {strategy_cfg.type!r} is not known; use 'default'")
    if strategy_cfg.absgrad and not getattr(renderer, "supports_absgrad", False):
        raise ConfigError(
            f"strategy.absgrad needs a renderer that computes absolute gradients; "
            f"{type(renderer).__name__} does not (use renderer.type gsplat or set strategy.absgrad false)"
        )
    return SplatDefaultStrategy(verbose=False, **options)
