"""Shadow weights: a second set of some Gaussian parameters (an average a hook keeps) that the
engine owns, moves with the Gaussians, swaps into the model for validation and export, and
checkpoints under keys of its own. No hook writes the model's tensors: hooks update the shadow."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence

import torch
from torch import Tensor

Message = Callable[[str], None]

#: Checkpoint keys: with ``export`` the checkpoint's ``gaussians`` are the shadow and
#: ``training_gaussians`` the training weights of the same parameters; without it ``gaussians``
#: are the training weights and ``shadow_gaussians`` the shadow.
TRAINING_KEY, SHADOW_KEY = "training_gaussians", "shadow_gaussians"


class ShadowWeights:
    """The run's shadow weights: none until a hook asks for them (:meth:`keep`)."""

    def __init__(self) -> None:
        self.tensors: Dict[str, Tensor] = {}
        self.validate = False  #: swapped in for each validation
        self.export = False  #: swapped in after training; checkpoints hold it as their Gaussians
        self._training: Optional[Dict[str, Tensor]] = None  # training weights while the shadow is in the model
        self._restored: Optional[Dict[str, Tensor]] = None  # from a checkpoint, until a hook keeps it again

    def keep(self, params: Mapping[str, Tensor], names: Sequence[str], validate: bool, export: bool) -> Dict[str, Tensor]:
        """Start (or, after a resume, take back) shadow copies of ``names``; returns the live dict
        the caller updates in place. Rows follow the Gaussians (:meth:`follow`)."""
        restored, self._restored = self._restored, None
        with torch.no_grad():
            if restored is not None and set(restored) == set(names):
                self.tensors = {n: restored[n].to(params[n].device).clone() for n in names}
            else:
                self.tensors = {n: params[n].detach().clone() for n in names}
        self.validate, self.export = bool(validate), bool(export)
        return self.tensors

    @torch.no_grad()
    def follow(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        """Move the shadow rows with their Gaussians; new rows (source -1) start from ``params``."""
        new, rows = sources < 0, sources.clamp(min=0)
        for name, shadow in list(self.tensors.items()):
            self.tensors[name] = torch.where(new.view(-1, *[1] * (shadow.dim() - 1)), params[name].detach(), shadow[rows])

    # -- in the model ---------------------------------------------------------------------
    @torch.no_grad()
    def swap_in(self, params: Mapping[str, Tensor]) -> None:
        """Put the shadow into the model (the training weights are kept aside)."""
        if not self.tensors or self._training is not None:
            return
        self._training = {n: params[n].detach().clone() for n in self.tensors}
        for name, shadow in self.tensors.items():
            params[name].copy_(shadow)

    @torch.no_grad()
    def swap_out(self, params: Mapping[str, Tensor]) -> None:
        """Put the training weights back."""
        if self._training is None:
            return
        for name, weights in self._training.items():
            params[name].copy_(weights)
        self._training = None

    @contextlib.contextmanager
    def for_validation(self, params: Mapping[str, Tensor]) -> Iterator[None]:
        """The shadow in the model within, when it is kept for validation."""
        if not self.validate:
            yield
            return
        self.swap_in(params)
        try:
            yield
        finally:
            self.swap_out(params)

    # -- checkpoints ------------------------------------------------------------------------
    def checkpoint_entries(self, gaussians: Dict[str, Tensor]) -> Dict[str, Any]:
        """The checkpoint's ``gaussians`` (the model's state as captured) and the shadow's keys."""
        training = {n: (self._training or {}).get(n, value) for n, value in gaussians.items()}
        if not self.tensors:
            return {"gaussians": training}
        if self.export:
            exported = {n: self.tensors[n].detach().clone() if n in self.tensors else training[n] for n in training}
            return {"gaussians": exported, TRAINING_KEY: {n: training[n] for n in self.tensors}}
        return {"gaussians": training, SHADOW_KEY: {n: t.detach().clone() for n, t in self.tensors.items()}}

    @torch.no_grad()
    def restore(self, checkpoint: Mapping[str, Any], params: Mapping[str, Tensor]) -> None:
        """After the model loaded the checkpoint's ``gaussians``: the training weights go back into
        the model and the shadow waits for the hook that keeps it (:meth:`keep`)."""
        training = checkpoint.get(TRAINING_KEY)
        if isinstance(training, dict) and training:
            self._restored = {n: params[n].detach().clone() for n in training}
            for name, weights in training.items():
                params[name].copy_(weights.to(params[name].device))
        elif isinstance(checkpoint.get(SHADOW_KEY), dict) and checkpoint[SHADOW_KEY]:
            self._restored = dict(checkpoint[SHADOW_KEY])

    def drop_unclaimed(self, warn: Message) -> None:
        """A restored shadow no hook took back is dropped, saying so (the run trains on)."""
        if self._restored is not None:
            self._restored = None
            warn("the checkpoint holds averaged Gaussians that no hook of this run keeps: training goes on "
                 "from its training weights, and the averages are dropped")
