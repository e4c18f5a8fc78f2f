"""The hook base class: one method per point of the training run."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Dict, List, Tuple, Union

from ..steps import check_step_annotations, option_defaults, scale_options, step_kinds

from ..protocol import StepOutputs, Trainer


class Priority(IntEnum):
    """Named priority levels; lower runs first."""

    HIGHEST = 0
    VERY_HIGH = 10
    HIGH = 30
    ABOVE_NORMAL = 40
    NORMAL = 50
    BELOW_NORMAL = 60
    LOW = 70
    VERY_LOW = 90
    LOWEST = 100


def get_priority(priority: Union[int, str, Priority]) -> int:
    """Turn a level name ('HIGH'), a Priority or an int in [0, 100] into an int."""
    if isinstance(priority, str):
        try:
            return int(Priority[priority.upper()])
        except KeyError:
            names = ", ".join(p.name for p in Priority)
            raise ValueError(f"unknown priority {priority!r}; use an int or one of {names}") from None
    value = int(priority)
    if not 0 <= value <= 100:
        raise ValueError(f"priority must be within [0, 100], got {value}")
    return value


#: Hook points in the order a run calls them; each takes the trainer first.
HOOK_POINTS = (
    "check",
    "before_run",
    "after_load_checkpoint",
    "before_train",
    "before_train_iter",
    "before_backward",
    "after_backward",
    "before_optimizer_step",
    "after_train_iter",
    "before_val",
    "before_val_iter",
    "after_val_iter",
    "after_val",
    "before_save_checkpoint",
    "after_train",
    "on_pause",
    "on_signal",
    "on_exception",
    "after_run",
)


class Hook:
    """Base class for hooks. Override only the points you need.

    Class attribute ``priority`` (or the ``priority`` argument) orders hooks at each
    point: lower first, ties in registration order; a level name (``"LOW"``) or an int in
    [0, 100], normalised when the hook is registered. Hooks with state implement
    ``state_dict`` / ``load_state_dict``; checkpoints store it under the hook's ``state_key``:
    its name in ``default_hooks`` / the type in ``custom_hooks`` / the class name when registered
    in code, with ``_2``, ``_3`` for repeats, so two instances never share state.
    """

    priority: Union[int, str] = Priority.NORMAL
    #: True when the hook's ``after_backward`` decides only from what every rank shares (the
    #: averaged losses and gradients, agreed readings): ranks then need no extra agreement per step
    rank_consistent: bool = False

    def __init__(self, priority: Union[int, str, None] = None) -> None:
        if priority is not None:
            self.priority = priority
        self.priority = get_priority(self.priority)

    @property
    def state_key(self) -> str:
        """Key under which the checkpoint stores this hook's state (unique in a trainer)."""
        return self.__dict__.get("_state_key") or type(self).__name__

    @state_key.setter
    def state_key(self, value: str) -> None:
        self.__dict__["_state_key"] = value

    @property
    def name(self) -> str:
        """The hook's name in tables and timings (its ``state_key``)."""
        return self.state_key

    # -- points ---------------------------------------------------------------------
    def check(self, trainer: Trainer) -> None:
        """Once, as soon as the trainer is built (``fit --dry-run`` too), before anything runs or
        is written: raise a ConfigError for options that do not suit this run (a step past its
        end, a partner hook or strategy missing). The run stops there, in one line naming the hook."""

    def before_run(self, trainer: Trainer) -> None:
        """Once, after everything is built and, when resuming, after the checkpoint is restored (the
        model, optimizers and hook states hold it); :meth:`after_load_checkpoint` follows."""

    def after_load_checkpoint(self, trainer: Trainer, checkpoint: Dict[str, Any]) -> None:
        """After a checkpoint was loaded for resuming; ``checkpoint`` is the loaded dict."""

    def before_train(self, trainer: Trainer) -> None:
        """Once, right before the first training step."""

    def before_train_iter(self, trainer: Trainer, step: int, batch: Dict[str, Any]) -> None:
        """Before rendering step ``step`` (1-based) with ``batch``."""

    def before_backward(self, trainer: Trainer, step: int, losses: Dict[str, Any]) -> None:
        """Before each ``backward()`` of step ``step`` (once per rendered micro-batch).

        ``losses`` maps every term's name to its unweighted value and ``"loss"`` to the weighted
        sum, which is what is backpropagated: reweight or add a term by changing ``losses["loss"]``
        (and store the term under its own name to have it logged and checked)."""

    def after_backward(self, trainer: Trainer, step: int, outputs: StepOutputs) -> None:
        """After ``loss.backward()`` (gradients averaged over ranks), before densification and the
        optimizer step; may set ``outputs.skip_update``."""

    def before_optimizer_step(self, trainer: Trainer, step: int, outputs: StepOutputs) -> None:
        """Right before the optimizers step (not called when the step's update is skipped); the
        gradients are final here. Densification follows the optimizer step by default
        (``optim.densify_after_step: true``), precedes it with ``false``."""

    def after_train_iter(
        self, trainer: Trainer, step: int, batch: Dict[str, Any], outputs: StepOutputs
    ) -> None:
        """After the optimizer and scheduler steps of ``step``."""

    def before_val(self, trainer: Trainer) -> None:
        """Before a validation pass over the test views."""

    def before_val_iter(self, trainer: Trainer, index: int, batch: Dict[str, Any]) -> None:
        """Before rendering test view ``index``."""

    def after_val_iter(
        self, trainer: Trainer, index: int, batch: Dict[str, Any], outputs: Dict[str, Any]
    ) -> None:
        """After rendering and scoring test view ``index``."""

    def after_val(self, trainer: Trainer, metrics: Dict[str, Any]) -> None:
        """After a validation pass, with the mean metrics."""

    def before_save_checkpoint(self, trainer: Trainer, checkpoint: Dict[str, Any]) -> None:
        """Before ``checkpoint`` is written; add to it in place."""

    def after_train(self, trainer: Trainer) -> None:
        """Once, after the last step and its validation."""

    def on_pause(self, trainer: Trainer, paused: bool) -> None:
        """When something (the viewer's Pause button) pauses the run between two steps
        (``paused`` True) and when it goes on again (False); the pause is left out of the
        training time."""

    def on_signal(self, trainer: Trainer, signum: int) -> None:
        """At the safe point after SIGINT / SIGTERM (the run then stops) or SIGUSR1 (it goes on)
        reached the run: call ``trainer.request_checkpoint()`` to have the state saved there."""

    def on_exception(self, trainer: Trainer, error: BaseException) -> None:
        """When the run fails (or is interrupted) with ``error``; the error is re-raised after."""

    def after_run(self, trainer: Trainer) -> None:
        """Always, last: close what ``before_run`` opened."""

    # -- helpers --------------------------------------------------------------------
    def every_n_steps(self, trainer: Trainer, n: int, start: int = 0) -> bool:
        """True when the current step is ``start + k * n`` for some k >= 1 (n <= 0: never)."""
        step = trainer.step
        return n > 0 and step > start and (step - start) % n == 0

    def is_last_step(self, trainer: Trainer) -> bool:
        """True on the run's final training step."""
        return trainer.step == trainer.max_steps

    def required_metrics(self) -> Tuple[str, ...]:
        """Validation metrics this hook cannot work without (e.g. ``("lpips",)``). The trainer checks
        them when it is built: one it can never compute (``metrics.lpips: false``, LPIPS weights
        that cannot be had) refuses the run in one line, before any training."""
        return ()

    def state_dict(self) -> Dict[str, Any]:
        """State to keep in checkpoints (empty for stateless hooks)."""
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    @classmethod
    def scale_steps(cls, options: Dict[str, Any], run: float, window: float, where: str) -> List[Tuple[str, Any, Any]]:
        """Scale the options of this hook's config entry (``options``, in place) that count steps:
        those annotated :data:`~splattrain.steps.Steps` by ``run`` (``trainer.schedule_steps``,
        ``steps_scaler``), :data:`~splattrain.steps.Window` by ``window`` (``steps_scaler``); returns
        ``(key path, written, scaled)`` per change. Override it for options holding steps in a
        structure (a schedule of ``[step, value]`` pairs). ConfigError when an ``int`` option that
        sounds like a step count carries no such annotation."""
        check_step_annotations(cls, "hook")
        return scale_options(step_kinds(cls), options, option_defaults(cls), run, window, where)

    def overridden_points(self) -> list[str]:
        """The points this hook's class overrides, in call order."""
        return [p for p in HOOK_POINTS if getattr(type(self), p) is not getattr(Hook, p)]
