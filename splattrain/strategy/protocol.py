"""The densification strategy protocol: gsplat's three calls, what the trainer hands them and
when, and the optional members (each with a default here)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Protocol, Tuple

import torch
from torch import Tensor

from ..errors import ConfigError
from ..steps import check_step_annotations, option_defaults, scale_options, step_kinds
from .rows import ReindexListener, RowChanges

Info = Dict[str, Any]

__all__ = ["Info", "ReindexListener", "SceneFacts", "StatisticsReducer", "Strategy"]


@dataclass(frozen=True)
class SceneFacts:
    """What the trainer knows of the scene before training, for strategies that size themselves
    by it (:meth:`Strategy.fit_to_scene`)."""

    train_views: int  # training images
    train_pixels: int  # their pixels, all views together, at the training resolution
    initial_gaussians: int  # Gaussians the run starts with
    scene_scale: float  # the cameras' extent in world units


class StatisticsReducer(Protocol):
    """Combines strategy statistics across ranks (the run's rank context is one)."""

    def sum_statistics(self, tensors: List[Tensor]) -> None: ...

    def reduce_statistics(self, state: Dict[str, Any], modes: Mapping[str, str]) -> None: ...

    def release_statistics(self, state: Dict[str, Any], modes: Mapping[str, str]) -> None: ...


class Strategy(RowChanges):
    """Base class of densification strategies (register subclasses with ``@STRATEGIES.register()``).

    A strategy is a dataclass whose fields are its config options (``strategy: {type: name,
    **options}``, each option checked against the fields). Writing one means gsplat's three calls:

    1. :meth:`initialize_state` once when the run is built: the running state (a dict);
    2. :meth:`step_pre_backward` once per rendered batch, after rendering and computing the
       loss, before the ``before_backward`` hooks and ``loss.backward()`` (e.g. to keep
       ``info["means2d"]``'s gradient);
    3. :meth:`step_post_backward` once per step, after every batch's backward and the
       ``after_backward`` hooks, after the optimizer step (before it with
       ``optim.densify_after_step: false``; not at all when a hook set ``outputs["skip_update"]``),
       with the last rendered batch's ``info`` (gsplat's layout: ``means2d`` with its ``.grad``,
       ``radii`` [C, N, 2], ``width``, ``height``, ``n_cameras``: the step's total view count) and,
       as the keyword ``context`` when its signature takes one, the step's
       ``StrategyContext`` (batch, render, every batch's info, last validation metrics).
       It may add, remove or move Gaussians through :mod:`splattrain.strategy.ops` or the row
       calls of :class:`~splattrain.strategy.rows.RowChanges`, which keep parameters, optimizer
       state and strategy state aligned and report the change (:meth:`reindexed`).

    ``state`` is the dict :meth:`initialize_state` returned; the trainer keeps it
    (``trainer.strategy_state``), hands it to every call, saves it in checkpoints and restores it
    on resume (keep it to tensors, numbers, strings, lists and dicts; the strategy object itself
    is rebuilt from the config). The ops apply each row change to every tensor of the dict they
    are given: tensors with one row per Gaussian are listed by :meth:`per_gaussian` (all of
    them, by default) and follow every op; keep other values as Python numbers.

    Several ranks (data-parallel training): every rank renders its own views, so statistics differ
    between ranks. Statistics added with :meth:`add_statistics` are summed over the ranks as they
    are added, so every rank holds the totals and decides alike, with nothing to declare. A
    strategy may instead accumulate per rank and combine only when it decides (cheaper): it names
    the entries in :meth:`reduced_statistics` (``"sum"`` or ``"max"``) and calls
    :meth:`sync_statistics` before a decision (the built-in strategies do). Random choices must
    come from generators seeded alike on every rank and draw the same amounts (the global torch
    generator is: every rank has the same seed and the same parameters).

    Step-valued fields are annotated :data:`~splattrain.steps.Steps` (a point or period in the
    run: they follow ``trainer.schedule_steps`` and ``steps_scaler``) or
    :data:`~splattrain.steps.Window` (how many steps of statistics a decision reads: only
    ``steps_scaler``); :meth:`scale_steps` scales them. A strategy that refines or resets on a
    schedule says when in :meth:`refines_at` / :meth:`resets_at`, from which :meth:`events` lists
    the run's events. Caps: a strategy that can bound the number of Gaussians sets
    ``supports_cap = True`` and has a ``max_gaussians`` field (0: no cap); when growing it honours
    :attr:`growth_cap`, which adds the bound a hook may set during a run (:meth:`limit_growth`).
    """

    supports_cap: bool = False

    # -- what the trainer calls ------------------------------------------------------------
    def check_sanity(self, params: Mapping[str, Tensor], optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
        """Called once when the trainer is built: refuse parameters or optimizers it cannot work with."""
        missing = [key for key in ("means", "scales", "quats", "opacities") if key not in params]
        if missing:
            raise ConfigError(f"strategy {type(self).__name__} needs the parameters {', '.join(missing)}")
        for name, optimizer in optimizers.items():
            if len(optimizer.param_groups) != 1 or len(optimizer.param_groups[0]["params"]) != 1:
                raise ConfigError(f"strategy {type(self).__name__}: optimizer '{name}' must hold exactly one parameter")

    # -- when it changes the scene ---------------------------------------------------------
    def refines_at(self, step: int) -> bool:
        """Whether the scene is refined (grown, pruned, relocated) after ``step``; never by default."""
        return False

    def resets_at(self, step: int) -> bool:
        """Whether the opacities are reset after ``step``; never by default."""
        return False

    def last_event_step(self, max_steps: int) -> int:
        """The last step at which an event may happen (``max_steps`` by default): :meth:`events`
        looks no further."""
        return max_steps

    def events(self, max_steps: int) -> Dict[str, List[int]]:
        """The steps within ``max_steps`` at which this strategy changes the scene, by kind
        (``refine``, ``reset``; a kind the class never schedules is left out), from
        :meth:`refines_at` / :meth:`resets_at`. The trainer refuses a ``reset`` in the last 5% of
        training and ``splattrain schedule`` shows them."""
        kinds = [(kind, getattr(self, method)) for kind, method in (("refine", "refines_at"), ("reset", "resets_at"))
                 if getattr(type(self), method) is not getattr(Strategy, method)]
        steps = range(1, self.last_event_step(max_steps) + 1)
        return {kind: [s for s in steps if due(s)] for kind, due in kinds}

    @classmethod
    def scale_steps(cls, options: Dict[str, Any], run: float, window: float, where: str = "strategy") -> List[Tuple[str, Any, Any]]:
        """Scale the :data:`~splattrain.steps.Steps` options in ``options`` (the ``strategy``
        section) by ``run`` and the :data:`~splattrain.steps.Window` ones by ``window``, in place;
        returns ``(key path, written, scaled)`` per change. ConfigError when a field that sounds like
        a step count is a plain ``int``."""
        check_step_annotations(cls, "strategy")
        return scale_options(step_kinds(cls), options, option_defaults(cls), run, window, where)

    #: A bound on growth set during the run (``trainer.cap_gaussians``); None: none. The
    #: configured ``max_gaussians`` stays as it was written.
    growth_limit: Optional[int] = None

    @property
    def growth_cap(self) -> int:
        """The most Gaussians growth may reach now: the smaller of the configured ``max_gaussians``
        and :attr:`growth_limit` (0: no cap). A strategy that caps its growth reads this."""
        caps = [int(c) for c in (getattr(self, "max_gaussians", 0) or 0, self.growth_limit or 0) if c > 0]
        return min(caps) if caps else 0

    def limit_growth(self, limit: Optional[int]) -> None:
        """Grow to at most ``limit`` Gaussians from now on, together with the configured
        ``max_gaussians`` (None: the configured cap alone). ConfigError without ``supports_cap``."""
        if not self.supports_cap:
            raise ConfigError(f"strategy {type(self).__name__} cannot cap the number of Gaussians (supports_cap); "
                              "use a strategy with max_gaussians")
        self.growth_limit = None if limit is None else int(limit)

    def fit_to_scene(self, facts: SceneFacts) -> None:
        """Called once when the trainer is built, before :meth:`initialize_state`: size options
        by the scene (e.g. a Gaussian budget from the training pixels). Does nothing by default."""

    # -- the three calls ---------------------------------------------------------------------
    def initialize_state(self, scene_scale: float = 1.0) -> Dict[str, Any]:
        """The running state of a new run (``scene_scale``: the cameras' extent in world units)."""
        return {"scene_scale": scene_scale}

    def step_pre_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info) -> None:
        """Before ``loss.backward()`` of each rendered batch."""

    def step_post_backward(self, params, optimizers, state: Dict[str, Any], step: int, info: Info,
                           context: Any = None) -> None:
        """After backward, with the last rendered batch's ``info`` and the step's
        ``StrategyContext`` (None when called without one, as gsplat's trainers do): refine when due."""

    # -- how the trainer drives them ---------------------------------------------------------
    def accumulate(self, params, state: Dict[str, Any], step: int, info: Info) -> None:
        """Add one rendered batch's statistics to ``state``: :meth:`post_backward` calls it for every
        batch but the last (whose ``info`` :meth:`step_post_backward` gets). Nothing by default."""

    def post_backward(self, params, optimizers, state: Dict[str, Any], step: int, infos: List[Info],
                      context: Any = None) -> None:
        """What the trainer calls once per step, with every rendered batch's ``info``:
        :meth:`accumulate` all but the last, then :meth:`step_post_backward` with the last (and
        ``context=`` when its signature takes it), then :meth:`release_statistics`."""
        for info in infos[:-1]:
            self.accumulate(params, state, step, info)
        if context is not None and takes_context(type(self)):
            self.step_post_backward(params, optimizers, state, step, infos[-1], context=context)
        else:
            self.step_post_backward(params, optimizers, state, step, infos[-1])
        self.release_statistics(state)

    # -- several ranks -----------------------------------------------------------------------
    def add_statistics(self, state: Dict[str, Any], **values: Tensor) -> None:
        """Add each of ``values`` (one row per Gaussian, from this rank's views) to the running sum
        ``state[name]`` (allocated at first use; a count becomes float32), summed over the ranks: every
        rank then holds the totals, so decisions read from them agree with no further call, and a
        checkpoint holds them whatever world size resumes it. On several ranks this is one all-reduce
        per call: make it at the same points on every rank."""
        names = list(values)
        increments = [v.detach().float() if not v.is_floating_point() else v.detach().clone() for v in values.values()]
        reducer = self.__dict__.get("_statistics_reducer")
        if reducer is not None:
            reducer.sum_statistics(increments)
        for name, increment in zip(names, increments):
            total = state.get(name)
            state[name] = increment if total is None else total.add_(increment)

    def reduced_statistics(self, state: Dict[str, Any]) -> Dict[str, str]:
        """The ``state`` entries accumulated per rank that must be combined across ranks before a
        refinement decision: key -> ``"sum"`` or ``"max"`` (none by default)."""
        return {}

    def set_statistics_reducer(self, reducer: Optional[StatisticsReducer]) -> None:
        """Attach the rank context that combines statistics (None: a single process)."""
        self.__dict__["_statistics_reducer"] = reducer

    def sync_statistics(self, state: Dict[str, Any]) -> None:
        """Combine :meth:`reduced_statistics` across ranks (nothing in a single process); call it
        after accumulating and before deciding what to refine. Every rank then holds the totals,
        until :meth:`release_statistics`."""
        reducer = self.__dict__.get("_statistics_reducer")
        if reducer is not None:
            reducer.reduce_statistics(state, self.reduced_statistics(state))
            self.__dict__["_holds_totals"] = True

    def restored_statistics(self, state: Dict[str, Any]) -> None:
        """``state`` came from a checkpoint, which holds the totals: rank 0 keeps them, the others
        start again from zero."""
        self.__dict__["_holds_totals"] = True
        self.release_statistics(state)

    def release_statistics(self, state: Dict[str, Any]) -> None:
        """Where every rank holds the totals (combined this step, or restored), zero the summed
        statistics on ranks other than 0, so the sum over the ranks stays the run's total; between
        combinations each rank accumulates its own views. The strategy alone knows which holds."""
        reducer = self.__dict__.get("_statistics_reducer")
        if reducer is not None and self.__dict__.pop("_holds_totals", False):
            reducer.release_statistics(state, self.reduced_statistics(state))

    def default_loss_terms(self) -> List[Dict[str, Any]]:
        """Loss terms this strategy needs beyond the photometric ones, used when the config does
        not list ``loss.terms`` itself (e.g. MCMC's opacity and scale regularisers)."""
        return []


def takes_context(cls: type) -> bool:
    """Whether ``cls.step_post_backward`` takes the keyword ``context`` (or any keyword)."""
    cached = _TAKES_CONTEXT.get(cls)
    if cached is None:
        parameters = inspect.signature(cls.step_post_backward).parameters.values()
        cached = _TAKES_CONTEXT[cls] = any(p.name == "context" or p.kind is inspect.Parameter.VAR_KEYWORD
                                           for p in parameters)
    return cached


_TAKES_CONTEXT: Dict[type, bool] = {}
