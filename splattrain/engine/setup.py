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
