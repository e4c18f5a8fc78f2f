"""Helpers the trainer uses to set up a run: the device, seeds and RNG states."""

from __future__ import annotations

import random
from typing import Any, Dict, Mapping

import numpy as np
import torch

from ..errors import ConfigError


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
