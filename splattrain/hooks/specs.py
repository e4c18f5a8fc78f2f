"""The hooks a config asks for: the default hooks with the user's overrides, then custom hooks."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ..errors import ConfigError
from ..registry import HOOKS, check_options
from .base import Hook, get_priority

#: Hooks every run gets unless ``default_hooks.<name>: null`` disables them.
DEFAULT_HOOKS: Dict[str, Dict[str, Any]] = {
    "timer": {"type": "IterTimerHook"},
    "logger": {"type": "LogHook"},
    "checkpoint": {"type": "CheckPointHook"},
    "auto_checkpoint": {"type": "AutoCheckpointHook"},
}

#: Hooks known by name but off unless ``default_hooks.<name>`` is given (e.g. ``viewer: {port: 8080}``).
OPTIONAL_DEFAULT_HOOKS: Dict[str, Dict[str, Any]] = {
    "viewer": {"type": "ViewerHook"},
}


#: Hooks that were removed, with the setting that replaced each (an old config naming one is told).
RETIRED_HOOKS: Dict[str, str] = {
    "ResolutionScheduleHook": "trainer.resolution.schedule (the same [[start_step, factor], ...] list, or auto)",
}


def hook_specs(default_hooks: Mapping[str, Any], custom_hooks: List[Mapping[str, Any]]) -> List[tuple[str, Dict[str, Any]]]:
    """(name, spec) for every hook to build: defaults with the user's overrides, then custom hooks."""
    specs: List[tuple[str, Dict[str, Any]]] = []
    known = {**DEFAULT_HOOKS, **OPTIONAL_DEFAULT_HOOKS}
    for name, override in default_hooks.items():
        if name not in known and (override is None or "type" not in override):
            raise ConfigError(
                f"default_hooks.{name}: not a default hook (known: {', '.join(known)}); "
                "give it a 'type' to add a hook under this name"
            )
    for name in list(DEFAULT_HOOKS) + [n for n in default_hooks if n not in DEFAULT_HOOKS]:
        spec = dict(known.get(name, {}))
        if name in default_hooks:
            override = default_hooks[name]
            if override is None:
                continue
            override = dict(override)
            if "type" in override and override["type"] != spec.get("type"):
                spec = override
            else:
                spec.update(override)
        specs.append((name, spec))
    seen: Dict[str, int] = {}
    for spec in custom_hooks:
        spec = dict(spec)
        base = str(spec["type"])
        seen[base] = seen.get(base, 0) + 1
        specs.append((base if seen[base] == 1 else f"{base}_{seen[base]}", spec))
    return specs


def check_hook_sections(sections: Mapping[str, Any], where: str = "") -> None:
    """Refuse unknown hook types and options in ``{default_hooks, custom_hooks}`` (builds nothing)."""
    default_hooks, custom_hooks = dict(sections.get("default_hooks") or {}), list(sections.get("custom_hooks") or [])
    for name, spec, section in hook_sections(default_hooks, custom_hooks):
        options = {k: v for k, v in spec.items() if k not in ("type", "priority")}
        check_options(HOOKS.get(str(spec["type"])), options, f"hook {name!r} ({spec['type']})", section)


def hook_sections(default_hooks: Mapping[str, Any], custom_hooks: List[Mapping[str, Any]]) -> List[tuple[str, Dict[str, Any], str]]:
    """(name, spec, key path) for every hook to build: ``default_hooks.<name>`` or ``custom_hooks[i]``."""
    specs = hook_specs(default_hooks, custom_hooks)
    first_custom = len(specs) - len(custom_hooks)
    sections = [(name, spec, f"custom_hooks[{i - first_custom}]" if i >= first_custom else f"default_hooks.{name}")
                for i, (name, spec) in enumerate(specs)]
    for _, spec, where in sections:
        if str(spec.get("type")) in RETIRED_HOOKS:
            raise ConfigError(f"{where}: {spec['type']} was removed; use {RETIRED_HOOKS[str(spec['type'])]}")
    return sections


HOOKS.set_checker(check_hook_sections)


def build_hook(name: str, spec: Dict[str, Any], where: str = "") -> Hook:
    """Build one hook from ``{type, priority?, **kwargs}`` (the entry at key path ``where``)."""
    spec = dict(spec)
    priority = spec.pop("priority", None)
    at = f"{where}: " if where else ""
    try:
        hook = HOOKS.build(spec, where=where)
    except ConfigError as err:
        raise ConfigError(f"{at}hook {name!r}: {err}") from None
    except Exception as err:  # the hook's own __init__ failed: name it
        raise ConfigError(f"{at}hook {name!r} ({spec.get('type')}) failed to start: {type(err).__name__}: {err}") from None
    if not isinstance(hook, Hook):
        raise ConfigError(f"hook {name!r}: {spec['type']!r} does not derive from splattrain.Hook")
    if priority is not None:
        try:
            hook.priority = get_priority(priority)
        except ValueError as err:
            raise ConfigError(f"hook {name!r}: {err}") from None
    hook.state_key = name
    return hook
