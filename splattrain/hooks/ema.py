"""EMAHook: a running average of the Gaussian parameters that follows densification."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch import Tensor

from ..errors import ConfigError
from ..registry import HOOKS
from ..steps import Steps
from .base import Hook, Priority

VARIANTS = ("ema", "swa", "momentum_annealing")


@HOOKS.register()
class EMAHook(Hook):
    """Keeps an average of the Gaussian parameters, row by row, and uses it for validation and export.

    Every ``interval`` steps from ``begin`` on, after the optimizer step, each averaged row is
    updated (before ``begin`` it just copies the parameters):

    - ``ema``: ``avg = (1 - momentum) * avg + momentum * param`` (MMEngine's convention);
    - ``momentum_annealing``: the same with ``max(momentum, gamma / (gamma + n))``, n the
      Gaussian's number of updates, so young Gaussians catch up fast;
    - ``swa``: the plain mean of all updates, ``avg += (param - avg) / (n + 1)``.

    Densification moves rows: the strategy reports every clone, split, prune and relocation,
    and the averages follow their Gaussians to their new rows; new or re-initialised Gaussians
    start from their current values (n = 1).

    The averages are the run's shadow weights (``trainer.keep_shadow``): the engine moves them
    with their Gaussians, swaps them in for each validation (``validate_with_average``) and, with
    ``export_average``, after training, so the final ``scene.ply`` and published checkpoint hold
    them, and checkpoints store them as their Gaussians (``splattrain eval / render / export`` use
    them) with the training weights beside them, which come back on resume. The hook only keeps
    the averages up to date; it never writes the model. The periodic ``ply/step_*.ply`` files
    hold the training weights.

    Args:
        momentum: weight of the new value (ema, momentum_annealing), in (0, 1].
        interval: update every N steps.
        begin: first step that averages (earlier steps copy the parameters).
        variant: ema | swa | momentum_annealing.
        gamma: momentum_annealing's annealing constant.
        groups: parameter groups to average (default all); the others are used as they are.
        validate_with_average: validate with the averaged weights.
        export_average: checkpoints and the final model hold the averaged weights.
    """

    priority = Priority.NORMAL

    def __init__(
        self,
        momentum: float = 0.01,
        interval: Steps = 1,
        begin: Steps = 0,
        variant: str = "ema",
        gamma: float = 100.0,
        groups: Optional[Sequence[str]] = None,
        validate_with_average: bool = True,
        export_average: bool = True,
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ConfigError(f"EMAHook variant {variant!r}: use one of {', '.join(VARIANTS)}")
        if not 0.0 < momentum <= 1.0 or interval < 1 or gamma <= 0:
            raise ConfigError("EMAHook needs 0 < momentum <= 1, interval >= 1 and gamma > 0")
        self.momentum = momentum
        self.interval = interval
        self.begin = begin
        self.variant = variant
        self.gamma = gamma
        self.groups: Optional[List[str]] = list(groups) if groups is not None else None
        self.validate_with_average = validate_with_average
        self.export_average = export_average
        self.averaged: Dict[str, Tensor] = {}  # the run's shadow weights (trainer.keep_shadow)
        self.updates: Optional[Tensor] = None  # [N] updates averaged into each row

    # -- set-up -------------------------------------------------------------------------
    def before_train(self, trainer) -> None:
        params = trainer.model.params
        unknown = sorted(set(self.groups or []) - set(params.keys()))
        if unknown:
            raise ConfigError(
                f"EMAHook groups: {', '.join(unknown)} not a parameter group (groups: {', '.join(params.keys())})"
            )
        self.averaged = trainer.keep_shadow(self._names(params), self.validate_with_average, self.export_average)
        count = len(params["means"])
        if self.updates is None or len(self.updates) != count:
            self.updates = torch.ones(count, device=params["means"].device)
        else:
            self.updates = self.updates.to(params["means"].device)
        trainer.on_gaussians_moved(self.follow)

    def _names(self, params: Mapping[str, Tensor]) -> List[str]:
        return self.groups or list(params.keys())

    @torch.no_grad()
    def _restart(self, params: Mapping[str, Tensor]) -> None:
        for name, average in self.averaged.items():
            average.copy_(params[name].detach())
        self.updates = torch.ones(len(params["means"]), device=params["means"].device)

    # -- averaging ----------------------------------------------------------------------
    @torch.no_grad()
    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        params = trainer.model.params
        if step < self.begin:
            self._restart(params)
            return
        if outputs.get("skip_update") or step % self.interval:
            return
        if len(params["means"]) != len(self.updates):
            raise RuntimeError(
                f"the Gaussian count changed from {len(self.updates)} to {len(params['means'])} without telling "
                "the trainer's on_gaussians_moved; remove Gaussians with trainer.remove_gaussians(mask)"
            )
        weight = self._weights()  # [N]
        for name, average in self.averaged.items():
            average.lerp_(params[name].detach(), weight.view(-1, *[1] * (average.dim() - 1)))
        self.updates += 1

    def _weights(self) -> Tensor:
        """Per-row weight of the new value."""
        if self.variant == "swa":
            return 1.0 / (self.updates + 1.0)
        momentum = torch.full_like(self.updates, self.momentum)
        if self.variant == "momentum_annealing":
            return torch.maximum(momentum, self.gamma / (self.gamma + self.updates))
        return momentum

    @torch.no_grad()
    def follow(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        """Move the update counts with their Gaussians (the engine moves the averages); new rows
        (source -1) start at one update."""
        rows = sources.clamp(min=0)
        self.updates = torch.where(sources < 0, torch.ones_like(self.updates[rows]), self.updates[rows])

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {} if self.updates is None else {"updates": self.updates}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The update counts (the averages themselves are the engine's, in the checkpoint's
        shadow keys); checked now, so a bad one is refused before the run starts."""
        if not state:
            return
        updates = state.get("updates")
        if not (isinstance(updates, torch.Tensor) and updates.dim() == 1 and updates.is_floating_point()
                and bool(torch.isfinite(updates).all())):
            raise ValueError("'updates' is not a finite floating-point tensor of one count per Gaussian")
        self.updates = updates.clone()
