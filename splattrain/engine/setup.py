"""Helpers the trainer uses to set up a run: device, seeds, user imports, hooks from config."""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping

import numpy as np
import torch

from ..errors import ConfigError
from ..hooks.base import Hook, get_priority
from ..registry import HOOKS

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


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when available, else cpu; other names are checked for availability."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"trainer.device {name!r} is not a device name (auto, cpu, cuda, cuda:N, mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"trainer.device is {name!r} but CUDA is not available; use 'auto' or 'cpu'")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"trainer.device is {name!r} but MPS is not available; use 'auto' or 'cpu'")
    return device


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_states() -> Dict[str, Any]:
    """Every global RNG state, for checkpoints."""
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    """Restore what ``rng_states`` returned."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def import_user_modules(modules: List[str], config_dir: Path | None = None) -> None:
    """Import ``modules`` (dotted names or .py paths) so their registrations take effect.

    The current directory and the config file's folder are searched as well.
    """
    for extra in (Path.cwd(), config_dir):
        if extra is not None and str(extra) not in sys.path:
            sys.path.insert(0, str(extra))
    for module in modules:
        name = module
        if module.endswith(".py"):
            path = Path(module)
            if not path.is_absolute() and config_dir is not None and not path.exists():
                path = config_dir / path
            if not path.is_file():
                raise ConfigError(f"imports: file '{module}' not found")
            sys.path.insert(0, str(path.parent.resolve()))
            name = path.stem
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            raise ConfigError(f"imports: cannot import module '{module}' ({err})") from None


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


def build_hook(name: str, spec: Dict[str, Any]) -> Hook:
    """Build one hook from ``{type, priority?, **kwargs}``."""
    spec = dict(spec)
    priority = spec.pop("priority", None)
    hook = HOOKS.build(spec)
    if not isinstance(hook, Hook):
        raise ConfigError(f"hook {name!r}: {spec['type']!r} does not derive from splattrain.Hook")
    if priority is not None:
        try:
            hook.priority = get_priority(priority)
        except ValueError as err:
            raise ConfigError(f"hook {name!r}: {err}") from None
    hook._registered_name = name  # type: ignore[attr-defined]
    return hook
