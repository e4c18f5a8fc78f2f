"""Name -> class registries used to build hooks, writers, datasets and renderers from config."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Type, TypeVar

from .errors import ConfigError

T = TypeVar("T")


def closest_names(name: str, candidates: Iterator[str] | list[str], n: int = 3) -> list[str]:
    """Return up to ``n`` candidates that look like ``name`` (for 'did you mean' hints)."""
    candidates = list(candidates)
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    return [lowered[c] for c in close]


def did_you_mean(name: str, candidates: Iterator[str] | list[str]) -> str:
    """A ' (did you mean X?)' suffix, or '' when nothing is close."""
    close = closest_names(name, candidates)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


class Registry:
    """A named mapping from type names to classes (or factories).

    >>> HOOKS = Registry("hook")
    >>> @HOOKS.register()
    ... class MyHook: ...
    >>> HOOKS.build({"type": "MyHook"})
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: Dict[str, Callable[..., Any]] = {}
        self._aliases: Dict[str, list[str]] = {}

    def register(
        self, name: Optional[str] = None, *, aliases: tuple[str, ...] = (), force: bool = False
    ) -> Callable[[Type[T]], Type[T]]:
        """Class decorator registering under ``name`` (default: the class name) and aliases."""

        def decorator(obj: Type[T]) -> Type[T]:
            for key in (name or obj.__name__, *aliases):
                if key in self._entries and self._entries[key] is not obj and not force:
                    raise KeyError(f"{self.kind} {key!r} is already registered by {self._entries[key]!r}")
                self._entries[key] = obj
            self._aliases[name or obj.__name__] = list(aliases)
            return obj

        return decorator

    def get(self, name: str) -> Callable[..., Any]:
        """The class registered as ``name``; a ConfigError naming close matches otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise ConfigError(
                f"unknown {self.kind} type {name!r}{did_you_mean(name, self._entries)}; "
                f"registered: {known}"
            ) from None

    def build(self, spec: Mapping[str, Any], **extra: Any) -> Any:
        """Build from ``{type: Name, **kwargs}``; ``extra`` kwargs are passed as well."""
        if "type" not in spec:
            raise ConfigError(f"{self.kind} spec {dict(spec)!r} has no 'type' key")
        kwargs = {k: v for k, v in spec.items() if k != "type"}
        cls = self.get(str(spec["type"]))
        try:
            inspect.signature(cls).bind(**kwargs, **extra)
        except TypeError as err:
            raise ConfigError(f"{self.kind} {spec['type']!r}: {err}") from None
        return cls(**kwargs, **extra)

    def describe(self) -> Dict[str, str]:
        """Primary names with the first line of each docstring and their aliases."""
        out = {}
        for key, aliases in sorted(self._aliases.items()):
            doc = inspect.getdoc(self._entries[key]) or ""
            line = doc.splitlines()[0] if doc else ""
            out[key] = line + (f" (also: {', '.join(aliases)})" if aliases else "")
        return out

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        """Primary names, sorted."""
        return iter(sorted(self._aliases))

    def __len__(self) -> int:
        return len(self._aliases)


HOOKS = Registry("hook")
WRITERS = Registry("writer")
DATASETS = Registry("dataset")
RENDERERS = Registry("renderer")
