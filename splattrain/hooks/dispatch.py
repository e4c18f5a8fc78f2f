"""Ordered, pre-resolved hook dispatch."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable, DefaultDict, Dict, List, Tuple

from ..errors import UserError
from .base import HOOK_POINTS, Hook, Priority, get_priority


class HookError(RuntimeError):
    """An exception raised inside a hook, re-raised naming the hook class and point."""


Entry = Tuple[Hook, Callable[..., Any]]


class HookDispatcher:
    """Keeps hooks sorted by priority and, per point, the bound methods that override it.

    The per-point lists are rebuilt on registration, so calling a point that no hook
    overrides is a dict lookup on an empty list. With ``timing`` on, the time spent in
    each hook at each point is added up in ``seconds`` / ``calls`` (keyed by hook name
    and point), and the time of whole dispatches in ``total_seconds``.
    """

    def __init__(self, timing: bool = True) -> None:
        self.hooks: List[Hook] = []
        self.entries: Dict[str, List[Entry]] = {p: [] for p in HOOK_POINTS}
        self.timing = timing
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

    def timing_rows(self, reference_seconds: float) -> List[List[str]]:
        """Rows (hook, point, calls, total s, ms per call, % of ``reference_seconds``), slowest first."""
        rows = []
        for (name, point), seconds in sorted(self.seconds.items(), key=lambda item: -item[1]):
            calls = self.calls[(name, point)]
            share = 100.0 * seconds / reference_seconds if reference_seconds > 0 else 0.0
            rows.append([name, point, str(calls), f"{seconds:.3f}", f"{1000 * seconds / calls:.3f}", f"{share:.2f}%"])
        return rows

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
