"""Name -> class registries: every pluggable component (hooks, writers, datasets, renderers,
loss terms, densification strategies, trainers) is registered here and built from config."""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Type, TypeVar

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

    ``locations`` are the modules (dotted names) that register a kind's built-ins, as in
    MMEngine: the registry imports them the first time anyone looks an entry up, lists, checks
    or builds, so nothing needs to import every package beforehand and the registry is the one
    place that knows what exists. A package may set how its config section is checked
    (:meth:`set_checker`).
    """

    def __init__(self, kind: str, locations: Sequence[str] = ()) -> None:
        self.kind = kind
        self.locations = tuple(locations)
        self._located = not self.locations
        self._checker: Optional[Callable[[Any, str], None]] = None
        self._entries: Dict[str, Callable[..., Any]] = {}
        self._aliases: Dict[str, list[str]] = {}

    def import_locations(self) -> None:
        """Import the modules that register the built-ins (once; later calls cost nothing)."""
        if self._located:
            return
        self._located = True  # first: the modules' own lookups while they load must not recurse
        for module in self.locations:
            importlib.import_module(module)

    def set_checker(self, checker: Callable[[Any, str], None]) -> None:
        """How :meth:`check` checks this kind's config section (``checker(section, where)``);
        the package defining the built-ins sets it when a section is more than ``{type, **options}``."""
        self._checker = checker

    def check(self, spec: Any, where: str) -> None:
        """Refuse unknown types and options in the config section ``spec`` at key path ``where``
        with a ConfigError naming the key; builds nothing, so it has no side effects."""
        self.import_locations()
        if self._checker is not None:
            self._checker(spec, where)
            return
        if "type" not in spec:
            raise ConfigError(f"{where}: needs a 'type'")
        options = {k: v for k, v in spec.items() if k != "type"}
        check_options(self.get(str(spec["type"])), options, f"{self.kind} {spec['type']!r}", where)

    def register(
        self, name: Optional[str] = None, *, aliases: tuple[str, ...] = (), force: bool = False
    ) -> Callable[[Type[T]], Type[T]]:
        """Class decorator registering under ``name`` (default: the class name) and aliases; the
        built-ins are registered first, so a name one of them has is refused whatever the order."""
        self.import_locations()

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
        self.import_locations()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise ConfigError(
                f"unknown {self.kind} type {name!r}{did_you_mean(name, self._entries)}; "
                f"registered: {known}"
            ) from None

    def build(self, spec: Mapping[str, Any], *, where: str = "", **extra: Any) -> Any:
        """Build from ``{type: Name, **options}``; ``extra`` kwargs are passed as well.

        Options are checked against the class's signature before it is called: an unknown
        option names the closest real one, a value of the wrong simple type (int, float, bool,
        str) names the expected type. ``where`` (e.g. ``"strategy"``) prefixes option names
        in messages so they read as config keys.
        """
        if "type" not in spec:
            raise ConfigError(f"{self.kind} spec {dict(spec)!r} has no 'type' key")
        kwargs = {k: v for k, v in spec.items() if k != "type"}
        cls = self.get(str(spec["type"]))
        kwargs = check_options(cls, kwargs, f"{self.kind} {spec['type']!r}", where, extra)
        return cls(**kwargs, **extra)

    def options(self, name: str) -> Dict[str, inspect.Parameter]:
        """The options (keyword parameters) the entry ``name`` accepts."""
        return _parameters(self.get(name))

    def describe(self) -> Dict[str, str]:
        """Primary names with the first line of each docstring and their aliases."""
        self.import_locations()
        out = {}
        for key, aliases in sorted(self._aliases.items()):
            doc = inspect.getdoc(self._entries[key]) or ""
            line = doc.splitlines()[0] if doc else ""
            out[key] = line + (f" (also: {', '.join(aliases)})" if aliases else "")
        return out

    def unregister(self, name: str) -> None:
        """Remove the entry registered as ``name`` (its primary name) with its aliases."""
        for key in (name, *self._aliases.pop(name, [])):
            self._entries.pop(key, None)

    def entries(self) -> list[tuple[str, Callable[..., Any]]]:
        """(primary name, class) in registration order."""
        self.import_locations()
        return [(name, self._entries[name]) for name in self._aliases]

    def __contains__(self, name: str) -> bool:
        self.import_locations()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        """Primary names, sorted."""
        self.import_locations()
        return iter(sorted(self._aliases))

    def __len__(self) -> int:
        self.import_locations()
        return len(self._aliases)


def _parameters(cls: Callable[..., Any]) -> Dict[str, inspect.Parameter]:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return {}
    return {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


_SIMPLE = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}


def _expected_types(annotation: Any) -> Optional[tuple]:
    """Accepted Python types for a simple annotation (``Optional`` allowed); None: not checked."""
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union and len(args) == 2 and type(None) in args:
        inner = _expected_types(next(a for a in args if a is not type(None)))
        return None if inner is None else (*inner, type(None))
    return None


def check_options(
    cls: Callable[..., Any], options: Mapping[str, Any], what: str, where: str = "", extra: Mapping[str, Any] = {}
) -> Dict[str, Any]:
    """``options`` checked against ``cls``'s signature; returns them with numbers written as text
    (YAML reads ``1e-3`` as a string) turned into numbers where an int or float is expected.

    Raises ConfigError for an unknown, missing or mistyped option; ``what`` names the plugin,
    ``where`` the config section, in the message.
    """
    prefix = f"{where}." if where else ""
    params = _parameters(cls)
    try:
        accepts_any = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        accepts_any = True
    for key in options:
        if key not in params and not accepts_any:
            known = [n for n in params if n not in extra]
            raise ConfigError(
                f"{what}: unknown option '{prefix}{key}'{did_you_mean(key, known + ['type'])}; "
                f"its options: {', '.join(known) or 'none'}"
            )
    try:
        hints = typing.get_type_hints(cls.__init__ if inspect.isclass(cls) else cls)
    except Exception:  # unresolvable annotations: leave types to the class
        hints = {}
    checked = dict(options)
    for key, value in options.items():
        expected = _expected_types(hints.get(key))
        if expected is None:
            continue
        if isinstance(value, str) and str not in expected:
            value = checked[key] = _number(value, int if float not in expected else float, value)
        is_bool, wants_bool = isinstance(value, bool), bool in expected
        if not isinstance(value, expected) or (is_bool and not wants_bool) or (wants_bool and value is not None and not is_bool):
            raise ConfigError(f"{what}: option '{prefix}{key}' must be {_type_name(hints[key])}, got {value!r}")
    try:
        inspect.signature(cls).bind(**checked, **extra)
    except TypeError as err:
        raise ConfigError(f"{what}: {err}") from None
    return checked


def _number(text: str, kind: type, default: Any) -> Any:
    """``text`` as a ``kind`` (int or float) when it spells one exactly, else ``default``."""
    try:
        value = float(text)
    except ValueError:
        return default
    if kind is int:
        return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else default
    return value


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


HOOKS = Registry("hook", locations=("splattrain.hooks",))
WRITERS = Registry("writer", locations=("splattrain.writers",))
DATASETS = Registry("dataset", locations=("splattrain.data",))
RENDERERS = Registry("renderer", locations=("splattrain.render",))
LOSSES = Registry("loss term", locations=("splattrain.losses",))
STRATEGIES = Registry("strategy", locations=("splattrain.strategy",))
TRAINERS = Registry("trainer", locations=("splattrain.engine",))
APPEARANCE = Registry("appearance model", locations=("splattrain.view_opt",))
POSE_OPT = Registry("pose refinement", locations=("splattrain.view_opt",))
