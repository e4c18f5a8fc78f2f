"""Ordered, pre-resolved hook dispatch."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable, DefaultDict, Dict, List, Tuple, Union

from ..errors import ConfigError, UserError
from .base import HOOK_POINTS, Hook, Priority, get_priority

#: ``trainer.hook_timing`` values: time hooks and report them when slow / always / never time them.
TIMING_MODES = ("auto", "summary", "off")
#: The share of the training steps' time above which ``auto`` prints the hook-timing table.
SLOW_HOOKS_SHARE = 0.05
#: ... and the seconds the hooks must have taken inside the steps (a short run's table is noise).
SLOW_HOOKS_SECONDS = 1.0
#: The points called inside a training step (their time is part of the steps' time).
STEP_POINTS = ("before_train_iter", "before_backward", "after_backward", "before_optimizer_step", "after_train_iter")


def timing_mode(value: Union[str, bool]) -> str:
    """``trainer.hook_timing`` as one of :data:`TIMING_MODES` (``true`` / ``false``, the values
    of older configs, mean ``summary`` / ``off``); ConfigError for anything else."""
    text = str(value).strip().lower()
    mode = {"true": "summary", "false": "off"}.get(text, text)
    if mode not in TIMING_MODES:
        raise ConfigError(f"trainer.hook_timing must be auto, summary or off, got {value!r}")
    return mode


class HookError(RuntimeError):
    """An exception raised inside a hook, re-raised naming the hook class and point."""


Entry = Tuple[Hook, Callable[..., Any]]


class HookDispatcher:
    """Keeps hooks sorted by priority and, per point, the bound methods that override it.

    The per-point lists are rebuilt on registration, so calling a point that no hook
    overrides is a dict lookup on an empty list. Unless ``timing`` is ``off`` (or False), the
    time spent in each hook at each point is added up in ``seconds`` / ``calls`` (keyed by hook
    name and point), and the time of whole dispatches in ``total_seconds``; ``timing`` also
    decides when the table is shown (:meth:`timing_report_due`).
    """

    def __init__(self, timing: Union[str, bool] = "auto") -> None:
        self.hooks: List[Hook] = []
        self.entries: Dict[str, List[Entry]] = {p: [] for p in HOOK_POINTS}
        self.timing_mode = timing_mode(timing)
        self.timing = self.timing_mode != "off"
        self.seconds: DefaultDict[Tuple[str, str], float] = defaultdict(float)
        self.calls: DefaultDict[Tuple[str, str], int] = defaultdict(int)
        self.total_seconds = 0.0

    def register(self, hook: Hook) -> None:
        """Add ``hook``: its priority is normalised (a level name or an int, even when the hook's
        ``__init__`` skipped ``super().__init__()``), it gets a ``state_key`` no other hook has,
        and equal priorities keep registration order (stable sort)."""
        if not isinstance(hook, Hook):
            raise TypeError(f"{hook!r} is not a Hook")
        hook.priority = get_priority(getattr(hook, "priority", Priority.NORMAL))
        taken = {h.state_key for h in self.hooks}
        base = hook.state_key
        key, count = base, 1
        while key in taken:
            count += 1
            key = f"{base}_{count}"
        hook.state_key = key
        self.hooks.append(hook)
        self.hooks.sort(key=lambda h: h.priority)
        self.entries = {
            point: [(h, getattr(h, point)) for h in self.hooks if point in h.overridden_points()]
            for point in HOOK_POINTS
        }

    def run(self, point: str, entries: List[Entry], trainer: Any, args: tuple) -> None:
        """Call ``entries`` in order; wrap a failure so it names the hook and point."""
        if not self.timing:
            for hook, method in entries:
                self._call(hook, method, point, trainer, args)
            return
        clock = time.perf_counter
        seconds, calls = self.seconds, self.calls
        started = clock()
        for hook, method in entries:
            begin = clock()
            try:
                self._call(hook, method, point, trainer, args)
            finally:
                key = (hook.name, point)
                seconds[key] += clock() - begin
                calls[key] += 1
        self.total_seconds += clock() - started

    @staticmethod
    def _call(hook: Hook, method: Callable[..., Any], point: str, trainer: Any, args: tuple) -> None:
        try:
            method(trainer, *args)
        except (HookError, UserError, KeyboardInterrupt, SystemExit):
            raise  # a user error (bad option, refused setting) stays one line at exit 2
        except OSError as err:
            if err.filename is None:  # a file the user named (full disk, read-only): reported as such
                raise HookError(f"{type(hook).__name__}.{point} failed: {type(err).__name__}: {err}") from err
            raise
        except Exception as err:
            raise HookError(f"{type(hook).__name__}.{point} failed: {type(err).__name__}: {err}") from err

    def step_share(self, step_seconds: float) -> float:
        """The share of ``step_seconds`` (the training steps' time) spent in hooks at the step's points."""
        inside = sum(seconds for (_, point), seconds in self.seconds.items() if point in STEP_POINTS)
        return inside / step_seconds if step_seconds > 0 else 0.0

    def timing_report_due(self, step_seconds: float) -> bool:
        """Whether the run ends with the timing table: always with ``summary``; with ``auto`` when
        hooks took more than :data:`SLOW_HOOKS_SHARE` of the training steps' time and at least
        :data:`SLOW_HOOKS_SECONDS`."""
        if not self.timing or not self.seconds:
            return False
        share = self.step_share(step_seconds)
        return self.timing_mode == "summary" or (share > SLOW_HOOKS_SHARE and share * step_seconds >= SLOW_HOOKS_SECONDS)

    def timing_rows(self, reference_seconds: float) -> List[List[str]]:
        """Rows (hook, point, calls, total s, ms per call, % of ``reference_seconds``), slowest first."""
        rows = []
        for (name, point), seconds in sorted(self.seconds.items(), key=lambda item: -item[1]):
            calls = self.calls[(name, point)]
            share = 100.0 * seconds / reference_seconds if reference_seconds > 0 else 0.0
            rows.append([name, point, str(calls), f"{seconds:.3f}", f"{1000 * seconds / calls:.3f}", f"{share:.2f}%"])
        return rows

    def required_metrics(self) -> List[Tuple[str, str]]:
        """``(hook, metric)`` for every validation metric a registered hook needs; the hook as its
        class and, when it differs, its name (``CheckPointHook 'checkpoint'``)."""
        needs = []
        for hook in self.hooks:
            kind = type(hook).__name__
            who = kind if hook.name == kind else f"{kind} {hook.name!r}"
            needs += [(who, metric) for metric in hook.required_metrics()]
        return needs

    def table(self) -> List[Tuple[str, List[str]]]:
        """(point, ['HookName (PRIORITY)', ...]) for every point some hook overrides."""
        rows = []
        for point in HOOK_POINTS:
            names = [f"{type(h).__name__} ({_priority_name(h.priority)})" for h, _ in self.entries[point]]
            if names:
                rows.append((point, names))
        return rows


def _priority_name(value: int) -> str:
    for level in Priority:
        if level.value == value:
            return level.name
    return str(value)
