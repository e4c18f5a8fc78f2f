"""The densification strategy protocol: what the trainer calls, when, and what it may rely on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

import torch
from torch import Tensor

from ..errors import ConfigError
from . import ops

#: Called with ``sources`` (LongTensor [N_new]: the row each Gaussian continues, -1 for one that was
#: created or re-initialised and starts from its current values) and the parameters after the change.
ReindexListener = Callable[[Tensor, Mapping[str, Tensor]], None]

Info = Dict[str, Any]


@dataclass(frozen=True)
class SceneFacts:
    """What the trainer knows of the scene before training, for strategies that size themselves
    by it (:meth:`Strategy.fit_to_scene`)."""

    train_views: int  # training images
    train_pixels: int  # their pixels, all views together, at the training resolution
    initial_gaussians: int  # Gaussians the run starts with
    scene_scale: float  # the cameras' extent in world units


class StatisticsReducer(Protocol):
    """Combines strategy statistics across ranks (see :meth:`Strategy.reduced_statistics`)."""

    def reduce_statistics(self, state: Dict[str, Any], modes: Mapping[str, str]) -> None: ...

    def release_statistics(self, state: Dict[str, Any], modes: Mapping[str, str]) -> None: ...


class Strategy:
    """Base class of densification strategies (register subclasses with ``@STRATEGIES.register()``).

    A strategy is a dataclass whose fields are its config options (``strategy: {type: name,
    **options}``, each option checked against the fields). Per training step the trainer calls,
    in this order:

    1. :meth:`step_pre_backward` once per rendered batch, after rendering and computing the
       loss, before the ``before_backward`` hooks and ``loss.backward()`` (e.g. to keep
       ``info["means2d"]``'s gradient);
    2. :meth:`post_backward` once, after every batch's backward and the ``after_backward``
       hooks, before the optimizer step (not at all when a hook set ``outputs["skip_update"]``),
       with the ``info`` of each rendered batch (gsplat's layout: ``means2d`` with its ``.grad``,
       ``radii`` [C, N, 2], ``width``, ``height``, ``n_cameras``: the step's total view count).
       It may add, remove or move Gaussians: it must do so through :mod:`splattrain.strategy.ops`
       (or :func:`ops.update_params_and_optimizers`) so parameters and optimizer state stay
       aligned, and report every row change with :meth:`reindexed`.

    ``state`` is the dict :meth:`initialize_state` returned; the trainer keeps it
    (``trainer.strategy_state``), hands it to every call, saves it in checkpoints and restores it
    on resume (keep it to tensors, numbers, strings, lists and dicts; the strategy object itself
    is rebuilt from the config). The ops apply each row change to every tensor of the dict they
    are given: tensors with one row per Gaussian are listed by :meth:`per_gaussian` (all of
    them, by default) and follow every op; keep other values as Python numbers.

    Several ranks (data-parallel training): every rank renders its own views, so statistics a
    strategy accumulates differ between ranks. :meth:`reduced_statistics` names the state entries
    to combine (``"sum"`` or ``"max"``) and the strategy calls :meth:`sync_statistics` after
    accumulating and before any refinement decision; afterwards every rank holds the totals and
    makes the same decisions. After :meth:`post_backward` the ranks other than 0 zero their
    summed entries again, so rank 0 (and its checkpoints) holds the run's totals. Random choices
    must come from generators seeded alike on every rank and draw the same amounts (the global
    torch generator is: every rank has the same seed and the same parameters).

    Caps: a strategy that can bound the number of Gaussians sets ``supports_cap = True`` and has
    a ``max_gaussians`` field (0: no cap) that it honours when growing; hooks (MemoryBudgetHook)
    may lower it during a run.
    """

    supports_cap: bool = False
    #: The fields holding step counts; ``trainer.steps_scaler`` / ``schedule_steps`` scale them.
    step_options: Tuple[str, ...] = ()
    #: Fields holding how many steps of statistics a decision reads (``refine_every``):
    #: ``trainer.steps_scaler`` scales them, ``schedule_steps`` does not (a shorter run would
    #: otherwise decide from fewer views and refine more often).
    window_options: Tuple[str, ...] = ()

    # -- what the trainer calls ------------------------------------------------------------
    def check_sanity(self, params: Mapping[str, Tensor], optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
        """Called once when the trainer is built: refuse parameters or optimizers it cannot work with."""
        missing = [key for key in ("means", "scales", "quats", "opacities") if key not in params]
        if missing:
            raise ConfigError(f"strategy {type(self).__name__} needs the parameters {', '.join(missing)}")
        for name, optimizer in optimizers.items():
            if len(optimizer.param_groups) != 1 or len(optimizer.param_groups[0]["params"]) != 1:
                raise ConfigError(f"strategy {type(self).__name__}: optimizer '{name}' must hold exactly one parameter")

    def events(self, max_steps: int) -> Dict[str, List[int]]:
        """The steps at which this strategy changes the scene, by kind (``refine``, ``reset``); the
        trainer refuses a ``reset`` in the last 5% of training and ``splattrain schedule`` shows them."""
        return {}

    def fit_to_scene(self, facts: SceneFacts) -> None:
        """Called once when the trainer is built, before :meth:`initialize_state`: size options
        by the scene (e.g. a Gaussian budget from the training pixels). Does nothing by default."""

    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        """The running state of a new run (``scene_scale``: the cameras' extent in world units)."""
        return {"scene_scale": scene_scale}

    def step_pre_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info) -> None:
        """Before ``loss.backward()`` of each rendered batch."""

    def accumulate(self, params, state: Dict[str, Any], step: int, info: Info) -> None:
        """Add one rendered batch's statistics to ``state`` (called by :meth:`post_backward`)."""

    def step_post_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info) -> None:
        """After backward, with the last rendered batch's ``info``: refine when due."""

    def post_backward(self, params, optimizers, state: Dict[str, Any], step: int, infos: List[Info]) -> None:
        """Once per step with every rendered batch's ``info``: :meth:`accumulate` all but the last,
        then :meth:`step_post_backward` with the last (which accumulates it and refines)."""
        for info in infos[:-1]:
            self.accumulate(params, state, step, info)
        self.step_post_backward(params, optimizers, state, step, infos[-1])
        self.release_statistics(state)

    # -- several ranks -----------------------------------------------------------------------
    def reduced_statistics(self, state: Dict[str, Any]) -> Dict[str, str]:
        """The ``state`` entries accumulated per rank that must be combined across ranks before a
        refinement decision: key -> ``"sum"`` or ``"max"`` (none by default)."""
        return {}

    def set_statistics_reducer(self, reducer: Optional[StatisticsReducer]) -> None:
        """Attach the rank context that combines statistics (None: a single process)."""
        self.__dict__["_statistics_reducer"] = reducer

    def sync_statistics(self, state: Dict[str, Any]) -> None:
        """Combine :meth:`reduced_statistics` across ranks (nothing in a single process); call it
        after accumulating and before deciding what to refine."""
        reducer = self.__dict__.get("_statistics_reducer")
        if reducer is not None:
            reducer.reduce_statistics(state, self.reduced_statistics(state))

    def release_statistics(self, state: Dict[str, Any]) -> None:
        """Zero the summed statistics on ranks other than 0 (after each step's refinement and
        after restoring a checkpoint, which holds the totals)."""
        reducer = self.__dict__.get("_statistics_reducer")
        if reducer is not None:
            reducer.release_statistics(state, self.reduced_statistics(state))

    def default_loss_terms(self) -> List[Dict[str, Any]]:
        """Loss terms this strategy needs beyond the photometric ones, used when the config does
        not list ``loss.terms`` itself (e.g. MCMC's opacity and scale regularisers)."""
        return []

    def per_gaussian(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """The part of ``state`` holding one row per Gaussian (every tensor, by default)."""
        return state

    # -- row changes ------------------------------------------------------------------------
    @property
    def _reindex_listeners(self) -> List[ReindexListener]:
        listeners = self.__dict__.get("_listeners")
        if listeners is None:
            listeners = self.__dict__["_listeners"] = []
        return listeners

    def add_reindex_listener(self, listener: ReindexListener) -> None:
        """Call ``listener(sources, params)`` after every op that moves, adds or removes Gaussians."""
        if listener not in self._reindex_listeners:
            self._reindex_listeners.append(listener)

    def reindexed(self, sources: Tensor, params: Mapping[str, Tensor]) -> None:
        """Tell the listeners how rows moved: ``sources[i]`` is the old row of new row ``i`` (-1: new)."""
        for listener in self._reindex_listeners:
            listener(sources, params)

    def remove_gaussians(self, params, optimizers, state: Dict[str, Any], mask: Tensor) -> None:
        """Remove the Gaussians where ``mask`` is True, with their optimizer and strategy state,
        and tell the listeners: the way for hooks to drop Gaussians outside densification."""
        per_gaussian = self.per_gaussian(state)
        ops.remove(params, optimizers, per_gaussian, mask)
        state.update(per_gaussian)
        self.reindexed((~mask).nonzero(as_tuple=True)[0], params)
