"""The training loss: weighted terms built from the ``loss`` config section."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from torch import Tensor

from ..errors import ConfigError
from ..registry import LOSSES
from .terms import LossTerm

#: ``loss.terms`` when the config gives none (before the strategy's own terms).
DEFAULT_SSIM_LAMBDA = 0.2


class Loss:
    """A weighted sum of named :class:`LossTerm` s; calling it returns every term (unweighted,
    by name) and ``loss``, the weighted sum."""

    def __init__(self, terms: Sequence[Tuple[str, LossTerm]]) -> None:
        if not terms:
            raise ConfigError("loss.terms is empty: give at least one term")
        self.terms: List[Tuple[str, LossTerm]] = list(terms)

    @property
    def needs_depth(self) -> bool:
        """Whether a term reads the rendered depth."""
        return any(term.needs_depth for _, term in self.terms)

    @property
    def needs_outputs(self) -> frozenset:
        """The renderer's extra images the terms read (``Renderer.extra_outputs``)."""
        return frozenset().union(*(term.needs_outputs for _, term in self.terms))

    def __call__(self, render: Any, batch: Mapping[str, Any], model: Any) -> Dict[str, Tensor]:
        values: Dict[str, Tensor] = {}
        total: Optional[Tensor] = None
        for name, term in self.terms:
            value = term(render, batch, model)
            values[name] = value
            weighted = term.weight * value
            total = weighted if total is None else total + weighted
        values["loss"] = total  # type: ignore[assignment]
        return values

    def drop_unavailable(self, trainer: Any, warn: Callable[[str], None]) -> None:
        """Remove the terms that cannot apply to ``trainer``'s run, with one warning each (the
        renderer is then asked for the extra images the others read: ``needs_outputs``)."""
        kept = []
        for name, term in self.terms:
            reason = term.unavailable(trainer)
            if reason is None:
                kept.append((name, term))
            else:
                warn(f"loss term '{name}' is skipped: {reason}")
        if not kept:
            raise ConfigError("no loss term applies to this run: " + ", ".join(n for n, _ in self.terms))
        self.terms = kept


def loss_specs(loss_cfg: Mapping[str, Any], strategy_terms: Sequence[Mapping[str, Any]] = ()) -> List[Dict[str, Any]]:
    """The term specs of a ``loss`` section: ``loss.terms`` as written, or, without it, L1 and
    D-SSIM weighted by ``loss.ssim_lambda`` (default 0.2) plus the strategy's own terms."""
    terms, ssim_lambda = loss_cfg.get("terms"), loss_cfg.get("ssim_lambda")
    if terms is not None:
        if ssim_lambda is not None:
            raise ConfigError(
                "loss.ssim_lambda and loss.terms are both set; give the dssim weight in loss.terms "
                "(e.g. [{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}]) and drop loss.ssim_lambda"
            )
        specs = [dict(spec) for spec in terms]
        for spec in specs:
            if "type" not in spec:
                raise ConfigError(f"every entry of loss.terms needs a 'type', got {spec!r}")
        return specs
    lam = DEFAULT_SSIM_LAMBDA if ssim_lambda is None else float(ssim_lambda)
    if not 0.0 <= lam <= 1.0:
        raise ConfigError(f"loss.ssim_lambda must be within [0, 1], got {lam}")
    return [{"type": "l1", "weight": 1.0 - lam}, {"type": "dssim", "weight": lam}, *map(dict, strategy_terms)]


def unlisted_strategy_terms(loss_cfg: Mapping[str, Any], strategy_terms: Sequence[Mapping[str, Any]]) -> List[str]:
    """One line per term the strategy asks for that an explicit ``loss.terms`` leaves out (so the
    run goes without it), saying how to add it; none when ``loss.terms`` is not given."""
    terms = loss_cfg.get("terms")
    if terms is None:
        return []
    listed = {spec.get("type") for spec in terms}
    return [f"loss.terms leaves out the strategy's own term {_yaml(spec)}: this run goes without it "
            f"(add it to loss.terms to use it)" for spec in strategy_terms if spec["type"] not in listed]


def _yaml(spec: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{key}: {value}" for key, value in spec.items()) + "}"


def build_loss(loss_cfg: Mapping[str, Any], strategy_terms: Sequence[Mapping[str, Any]] = ()) -> Loss:
    """The :class:`Loss` of a ``loss`` section (see :func:`loss_specs`); a term's name is its
    ``name`` option or its type, with ``_2``, ``_3`` for repeats."""
    built: List[Tuple[str, LossTerm]] = []
    seen: Dict[str, int] = {}
    for index, spec in enumerate(loss_specs(loss_cfg, strategy_terms)):
        name = str(spec.pop("name", spec["type"]))
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        term = LOSSES.build(spec, where=f"loss.terms[{index}]")
        if not isinstance(term, LossTerm):
            raise ConfigError(f"loss term {spec['type']!r} does not derive from splattrain.LossTerm")
        built.append((name, term))
    return Loss(built)


def check_loss_section(loss_cfg: Mapping[str, Any], where: str = "loss") -> None:
    """Refuse unknown term types and options in a ``loss`` section (the terms are built and
    dropped; the strategy's own terms are built-in and checked when the run builds them)."""
    build_loss(loss_cfg)


LOSSES.set_checker(check_loss_section)
