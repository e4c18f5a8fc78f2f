"""Helpers the trainer uses to set up a run: device, seeds, hooks from config."""

from __future__ import annotations

import random
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


def raw_rng_states() -> Dict[str, Any]:
    """Every global RNG state as the libraries return it (cheap: taken before each step)."""
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def rng_states(raw: Mapping[str, Any] | None = None) -> Dict[str, Any]:
    """Every global RNG state (or those of ``raw_rng_states``) for checkpoints, as tensors,
    numbers and lists only (so a checkpoint loads with ``torch.load(weights_only=True)``)."""
    raw = raw if raw is not None else raw_rng_states()
    version, internal, gauss = raw["python"]
    kind, keys, pos, has_gauss, cached = raw["numpy"]
    states = dict(raw)
    states["python"] = [version, list(internal), gauss]
    states["numpy"] = [kind, torch.from_numpy(np.asarray(keys, dtype=np.uint32).astype(np.int64)), int(pos),
                       int(has_gauss), float(cached)]
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    """Restore what ``rng_states`` returned."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states["numpy"]
    if isinstance(keys, torch.Tensor):
        keys = keys.numpy().astype(np.uint32)
    np.random.set_state((kind, keys, pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def hook_specs(default_hooks: Mapping[str, Any], custom_hooks: List[Mapping[str, Any]]) -> List[tuple[str, Dict[str, Any]]]:
    """(name, spec) for every hook to build: defaults with the user's overrides, then custom hooks."""
    specs: List[tuple[str, Dict[str, Any]]] = []
    for name, override in default_hooks.items():
        if name not in DEFAULT_HOOKS and (override is None or "type" not in override):
            raise ConfigError(
                f"default_hooks.{name}: not a default hook (known: {', '.join(DEFAULT_HOOKS)}); "
                "give it a 'type' to add a hook under this name"
            )
    for name in list(DEFAULT_HOOKS) + [n for n in default_hooks if n not in DEFAULT_HOOKS]:
        spec = dict(DEFAULT_HOOKS.get(name, {}))
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
    try:
        hook = HOOKS.build(spec)
    except ConfigError as err:
        raise ConfigError(f"hook {name!r}: {err}") from None
    except Exception as err:  # the hook's own __init__ failed: name it
        raise ConfigError(f"hook {name!r} ({spec.get('type')}) failed to start: {type(err).__name__}: {err}") from None
    if not isinstance(hook, Hook):
        raise ConfigError(f"hook {name!r}: {spec['type']!r} does not derive from splattrain.Hook")
    if priority is not None:
        try:
            hook.priority = get_priority(priority)
        except ValueError as err:
            raise ConfigError(f"hook {name!r}: {err}") from None
    hook.state_key = name
    return hook
