"""Build the densification strategy a config's ``strategy`` section names."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..errors import ConfigError
from ..registry import STRATEGIES
from .protocol import Strategy

#: Options earlier versions read from ``strategy``, and where they live now.
MOVED_OPTIONS = {
    ("mcmc", "prune_opa"): "strategy.min_opacity",
    ("mcmc", "opacity_reg"): "loss.terms: [..., {type: opacity_reg, weight: 0.01}]",
    ("mcmc", "scale_reg"): "loss.terms: [..., {type: scale_reg, weight: 0.01}]",
}


def build_strategy(
    spec: Mapping[str, Any], renderer: object = None, warn: Optional[Callable[[str], None]] = None
) -> Strategy:
    """The strategy ``{type: name, **options}`` from the STRATEGIES registry (``type`` defaults to
    ``default``), checked against ``renderer`` (absolute gradients need a renderer that has them).

    An option of another registered strategy that this one lacks is dropped with one ``warn``
    (so ``strategy.type=mcmc`` works over a config written for ``default``); any other unknown
    option is a ConfigError naming the closest real one.
    """
    options = dict(spec)
    kind = str(options.pop("type", "default"))
    cls = STRATEGIES.get(kind)
    own = STRATEGIES.options(kind)
    foreign = {}
    for key in list(options):
        moved = MOVED_OPTIONS.get((kind, key))
        if moved is not None:
            raise ConfigError(f"strategy.{key} is not an option of strategy {kind!r}; write {moved}")
        if key not in own and any(key in STRATEGIES.options(other) for other in STRATEGIES):
            foreign[key] = options.pop(key)
    if foreign and warn is not None:
        warn(f"strategy.type {kind} ignores " + ", ".join(f"strategy.{k}={v}" for k, v in foreign.items()))
    strategy = STRATEGIES.build({"type": kind, **options}, where="strategy")
    if not isinstance(strategy, Strategy) or cls is None:
        raise ConfigError(f"strategy {kind!r} does not derive from splattrain.Strategy")
    if getattr(strategy, "absgrad", False) and renderer is not None and not getattr(renderer, "supports_absgrad", False):
        raise ConfigError(
            f"strategy.absgrad needs a renderer that computes absolute gradients; {type(renderer).__name__} "
            "does not (use renderer.type auto, cpu, torch or gsplat, or set strategy.absgrad false)"
        )
    return strategy


def check_strategy_section(spec: Mapping[str, Any], where: str = "strategy") -> None:
    """Refuse unknown types and options in a ``strategy`` section (the strategy is built and
    dropped: building one has no side effects)."""
    build_strategy(spec)


STRATEGIES.set_checker(check_strategy_section)
