"""Ordered, pre-resolved hook dispatch."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from .base import HOOK_POINTS, Hook


class HookError(RuntimeError):
    """An exception raised inside a hook, re-raised naming the hook class and point."""


Entry = Tuple[Hook, Callable[..., Any]]


class HookDispatcher:
    """Keeps hooks sorted by priority and, per point, the bound methods that override it.

    The per-point lists are rebuilt on registration, so calling a point that no hook
    overrides is a dict lookup on an empty list.
    """

    def __init__(self) -> None:
        self.hooks: List[Hook] = []
        self.entries: Dict[str, List[Entry]] = {p: [] for p in HOOK_POINTS}

    def register(self, hook: Hook) -> None:
        """Add ``hook``; equal priorities keep registration order (stable sort)."""
        if not isinstance(hook, Hook):
            raise TypeError(f"{hook!r} is not a Hook")
        self.hooks.append(hook)
        self.hooks.sort(key=lambda h: h.priority)
        self.entries = {
            point: [(h, getattr(h, point)) for h in self.hooks if point in h.overridden_points()]
            for point in HOOK_POINTS
        }

    def run(self, point: str, entries: List[Entry], trainer: Any, args: tuple) -> None:
        """Call ``entries`` in order; wrap a failure so it names the hook and point."""
        for hook, method in entries:
            try:
                method(trainer, *args)
            except HookError:
                raise
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as err:
                raise HookError(f"{type(hook).__name__}.{point} failed: {type(err).__name__}: {err}") from err

    def table(self) -> List[Tuple[str, List[str]]]:
        """(point, ['HookName (PRIORITY)', ...]) for every point some hook overrides."""
        rows = []
        for point in HOOK_POINTS:
            names = [f"{type(h).__name__} ({_priority_name(h.priority)})" for h, _ in self.entries[point]]
            if names:
                rows.append((point, names))
        return rows


def _priority_name(value: int) -> str:
    from .base import Priority

    for level in Priority:
        if level.value == value:
            return level.name
    return str(value)
