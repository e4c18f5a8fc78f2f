"""EMAHook: a running average of the Gaussian parameters that follows densification."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch import Tensor

from ..checkpoint_schema import PARAM_NAMES
from ..errors import ConfigError
from ..registry import HOOKS
from ..steps import Steps
from . import state as state_values
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

    With ``validate_with_average`` the averaged weights are swapped in for each validation and
    swapped back after. With ``export_average`` checkpoints store the averaged weights as their
    Gaussians (so ``splattrain eval / render / export`` use them; the training weights ride in
    this hook's state and come back on resume), and after training the averaged weights stay
    in the model, so the final ``scene.ply`` and published checkpoint hold them. The periodic
    ``ply/step_*.ply`` files hold the training weights.

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
        self.averaged: Dict[str, Tensor] = {}
        self.updates: Optional[Tensor] = None  # [N] updates averaged into each row
        self._training: Optional[Dict[str, Tensor]] = None  # training weights while the average is in the model
        self._loaded: Optional[Dict[str, Any]] = None

    # -- set-up -------------------------------------------------------------------------
    def before_train(self, trainer) -> None:
        params = trainer.model.params
        unknown = sorted(set(self.groups or []) - set(params.keys()))
        if unknown:
            raise ConfigError(
                f"EMAHook groups: {', '.join(unknown)} not a parameter group (groups: {', '.join(params.keys())})"
            )
        if not self.averaged:
            self._restart(params)
        trainer.on_gaussians_moved(self.follow)

    def _names(self, params: Mapping[str, Tensor]) -> List[str]:
        return self.groups or list(params.keys())

    @torch.no_grad()
    def _restart(self, params: Mapping[str, Tensor]) -> None:
        self.averaged = {name: params[name].detach().clone() for name in self._names(params)}
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
        """Move the averages with their Gaussians; rows with source -1 start from ``params``."""
        new = sources < 0
        rows = sources.clamp(min=0)
        for name, average in self.averaged.items():
            mask = new.view(-1, *[1] * (average.dim() - 1))
            self.averaged[name] = torch.where(mask, params[name].detach(), average[rows])
        self.updates = torch.where(new, torch.ones_like(self.updates[rows]), self.updates[rows])

    # -- the averaged weights in the model --------------------------------------------
    @torch.no_grad()
    def _swap_in(self, trainer) -> None:
        if self._training is not None:
            return
        params = trainer.model.params
        self._training = {name: params[name].detach().clone() for name in self.averaged}
        for name, average in self.averaged.items():
            params[name].copy_(average)

    @torch.no_grad()
    def _swap_out(self, trainer) -> None:
        if self._training is None:
            return
        for name, weights in self._training.items():
            trainer.model.params[name].copy_(weights)
        self._training = None

    def before_val(self, trainer) -> None:
        if self.validate_with_average:
            self._swap_in(trainer)

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        self._swap_out(trainer)

    def after_train(self, trainer) -> None:
        if self.export_average:
            self._swap_in(trainer)

    def on_exception(self, trainer, error: BaseException) -> None:
        self._swap_out(trainer)

    # -- checkpoints --------------------------------------------------------------------
    def before_save_checkpoint(self, trainer, checkpoint: Dict[str, Any]) -> None:
        if not self.averaged:
            return
        gaussians = checkpoint["gaussians"]
        training = {n: (self._training or {}).get(n, gaussians[n]) for n in gaussians}
        state = checkpoint["hooks"].setdefault(self.name, {})
        if self.export_average:
            checkpoint["gaussians"] = {
                n: self.averaged[n].clone() if n in self.averaged else training[n] for n in gaussians
            }
            state["training"] = {n: training[n] for n in self.averaged}
            state.pop("averaged", None)
        else:
            checkpoint["gaussians"] = training

    def state_dict(self) -> Dict[str, Any]:
        if not self.averaged:
            return {}
        return {"averaged": dict(self.averaged), "updates": self.updates}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Check ``state`` now (so a bad one is refused before the run starts); it is applied once
        the model is restored (``after_load_checkpoint``)."""
        if state:
            weights = state_values.tensors(state, "training" if "training" in state else "averaged")
            unknown = sorted(set(weights) - set(PARAM_NAMES))
            if unknown:
                raise ValueError(f"it averages {unknown}, which are not Gaussian parameters")
            updates = state.get("updates")
            rows = {len(value) for value in weights.values() if value.dim() > 0}
            if not (isinstance(updates, torch.Tensor) and updates.dim() == 1 and updates.is_floating_point()
                    and rows == {len(updates)} and bool(torch.isfinite(updates).all())):
                raise ValueError("'updates' is not a finite floating-point tensor of one count per Gaussian")
        self._loaded = state

    @torch.no_grad()
    def after_load_checkpoint(self, trainer, checkpoint: Dict[str, Any]) -> None:
        state, self._loaded = self._loaded, None
        if not state:
            return
        params = trainer.model.params
        if "training" in state:  # the checkpoint's Gaussians are the averages
            self.averaged = {n: params[n].detach().clone() for n in state["training"]}
            for name, weights in state["training"].items():
                params[name].copy_(weights)
        else:
            self.averaged = {n: v.to(params[n].device).clone() for n, v in state["averaged"].items()}
        self.updates = state["updates"].to(params["means"].device).clone()
