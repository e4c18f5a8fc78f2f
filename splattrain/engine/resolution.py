"""Coarse-to-fine training: the training views' resolution by step (``trainer.resolution``).

A step's cost on the CPU is mostly compositing, which grows with the pixels; early in a run the
Gaussians are still finding the coarse structure, which a smaller image shows as well. The
engine serves the training views shrunk by the schedule's factor at each step (through the data
pipeline, intrinsics following); validation keeps the loaded resolution.

``trainer.resolution.schedule``:

- ``null``: full resolution throughout (the default);
- ``[[start_step, factor], ...]``: each factor (>= 1) from its start step on;
- ``auto``: from the training images' frequency content, in the manner of DashGaussian (Chen et
  al., CVPR 2025): the run starts at the largest factor at which every image keeps at least a
  quarter of its spectrum's magnitude (at most ``max_factor``), and the retained magnitude grows
  geometrically (its logarithm linearly in steps) to the full spectrum at step ``until``
  (default: half the run). The factor is taken from a few levels (each about half the pixels of
  the next), so the views are resized a handful of times.

The start steps and ``until`` are step settings: they follow ``trainer.schedule_steps``.
"""

from __future__ import annotations

import math
from collections import abc
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from omegaconf import ListConfig, OmegaConf

from ..config.schema import ResolutionConfig
from ..config.values import MAX_STEPS
from ..data.types import Frame
from ..errors import ConfigError
from ..steps import scale_count

#: Retained share of each image's spectrum magnitude at the starting factor (DashGaussian's 1/4).
START_SHARE = 0.25
#: Images whose spectra the ``auto`` schedule reads (evenly spread over the training views).
SAMPLED_VIEWS = 16
#: Each level has about half the pixels of the next finer one.
LEVEL_RATIO = math.sqrt(2.0)


@dataclass(frozen=True)
class ResolutionSchedule:
    """The training downscale factor by step: ``levels`` are ``(start_step, factor)``, ascending steps."""

    levels: Tuple[Tuple[int, float], ...]

    def factor_at(self, step: int) -> float:
        """The factor in force at ``step`` (1 before the first level)."""
        factor = 1.0
        for start, value in self.levels:
            if step >= start:
                factor = value
            else:
                break
        return factor

    def describe(self) -> str:
        """``1/4 from step 0, 1/2 from step 300, full from step 600``."""
        return ", ".join(f"{'full' if f == 1 else f'1/{f:g}'} from step {s}" for s, f in self.levels)


def explicit_levels(schedule: Any, where: str = "trainer.resolution.schedule") -> Tuple[Tuple[int, float], ...]:
    """``[[start_step, factor], ...]`` checked: pairs of numbers, whole start steps in [0, MAX_STEPS],
    finite factors >= 1; sorted. A ConfigError naming ``where`` otherwise."""
    pairs = [_pair(entry) for entry in schedule] if _is_list(schedule) else [None]
    if any(pair is None for pair in pairs):
        raise ConfigError(f"key '{where}' must be null, auto or [[start_step, factor], ...], got {_show(schedule)}")
    usable = [start.is_integer() and 0 <= start <= MAX_STEPS and math.isfinite(factor) and factor >= 1
              for start, factor in pairs]
    if not pairs or not all(usable):
        raise ConfigError(f"key '{where}' needs [[start_step >= 0, factor >= 1], ...] with at least one pair, "
                          f"got {_show(schedule)}")
    return tuple(sorted((int(start), factor) for start, factor in pairs))


def _is_list(value: Any) -> bool:
    return isinstance(value, abc.Sequence) and not isinstance(value, (str, bytes))


def _pair(entry: Any) -> Optional[Tuple[float, float]]:
    """``[start, factor]`` as two floats (numbers or numeric text); None when it is no such pair."""
    if not _is_list(entry) or len(entry) != 2:
        return None
    numbers = []
    for value in entry:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return None
        try:
            numbers.append(float(value))
        except ValueError:
            return None
    return numbers[0], numbers[1]


def _show(value: Any) -> str:
    """A config value as written (a plain list, not a ListConfig)."""
    return repr(OmegaConf.to_container(value) if isinstance(value, ListConfig) else value)


def check_resolution(cfg: ResolutionConfig | Any) -> None:
    """Refuse a malformed ``trainer.resolution`` section (one ConfigError naming the key): its
    schedule, ``until`` and ``max_factor``, before any of them is scaled or used."""
    schedule = cfg.schedule
    if isinstance(schedule, str):
        if schedule != "auto":
            raise ConfigError(f"key 'trainer.resolution.schedule' must be null, auto or [[start_step, factor], ...], "
                              f"got {schedule!r}")
    elif schedule is not None:
        explicit_levels(schedule)
    max_factor = cfg.max_factor
    if isinstance(max_factor, bool) or not isinstance(max_factor, (int, float)) or not (
            math.isfinite(max_factor) and max_factor >= 1):
        raise ConfigError(f"key 'trainer.resolution.max_factor' must be a finite number >= 1, got {max_factor!r}")
    until = cfg.until
    if until is not None and (isinstance(until, bool) or not isinstance(until, int) or not 0 <= until <= MAX_STEPS):
        raise ConfigError(f"key 'trainer.resolution.until' must be a step in [0, {MAX_STEPS}] or null, got {until!r}")


def scale_resolution_steps(section: Dict[str, Any], run: float) -> List[Tuple[str, Any, Any]]:
    """Scale the start steps of an explicit schedule and ``until`` by ``run`` in place (the
    ``trainer.resolution`` section as a plain dict, checked first); one ``(key path, written,
    scaled)`` each."""
    changes = []
    schedule = section.get("schedule")
    if _is_list(schedule):
        explicit_levels(schedule)
        written = [list(pair) for pair in schedule]
        scaled = [[scale_count(int(float(start)), run) if float(start) else 0, factor] for start, factor in written]
        if scaled != written:
            section["schedule"] = scaled
            changes.append(("trainer.resolution.schedule", written, scaled))
    until = section.get("until")
    if until:
        scaled_until = scale_count(int(until), run)
        if scaled_until != until:
            section["until"] = scaled_until
            changes.append(("trainer.resolution.until", until, scaled_until))
    return changes


def build_schedule(cfg: ResolutionConfig | Any, max_steps: int, frames: Sequence[Frame],
                   background: Sequence[float]) -> Optional[ResolutionSchedule]:
    """The run's schedule (None: full resolution throughout)."""
    check_resolution(cfg)
    schedule = cfg.schedule
    if schedule is None:
        return None
    if isinstance(schedule, str):
        until = int(cfg.until) if cfg.until else max_steps // 2
        return auto_schedule(frames, background, until, float(cfg.max_factor))
    return ResolutionSchedule(explicit_levels(schedule))


def auto_schedule(frames: Sequence[Frame], background: Sequence[float], until: int,
                  max_factor: float) -> Optional[ResolutionSchedule]:
    """The frequency-guided schedule for ``frames`` (see the module docstring); None when even the
    first level would be full resolution."""
    picked = [frames[i] for i in np.linspace(0, len(frames) - 1, min(SAMPLED_VIEWS, len(frames))).round().astype(int)]
    spectra = [_magnitude(_grey(frame.pixels(), background)) for frame in picked]
    factors = np.exp(np.linspace(0.0, math.log(max_factor), 64)) if max_factor > 1 else np.ones(1)
    retained = np.array([[_retained(spectrum, f) for f in factors] for spectrum in spectra])  # [views, factors]
    share = retained / retained[:, :1]
    start_ok = np.all(share >= START_SHARE, axis=0)
    start = float(factors[np.nonzero(start_ok)[0].max()])
    if start < LEVEL_RATIO:
        return None
    scene = retained.mean(axis=0)  # the scene's retained magnitude by factor
    lowest = np.interp(math.log(start), np.log(factors), np.log(scene))
    span = math.log(scene[0]) - lowest
    levels: List[Tuple[int, float]] = []
    factor = start
    while factor >= LEVEL_RATIO * 0.999:
        at = np.interp(math.log(factor), np.log(factors), np.log(scene))
        progress = 0.0 if span <= 0 else (at - lowest) / span
        levels.append((int(round(until * progress)), round(factor, 3)))
        factor /= LEVEL_RATIO
    levels.append((until, 1.0))
    return ResolutionSchedule(tuple(_merged(levels)))


def _merged(levels: List[Tuple[int, float]]) -> List[Tuple[int, float]]:
    """Levels that start at the same step collapse into the finest of them."""
    merged: Dict[int, float] = {}
    for start, factor in levels:
        merged[start] = min(factor, merged.get(start, factor))
    return sorted(merged.items())


def _grey(image: np.ndarray, background: Sequence[float]) -> np.ndarray:
    """A uint8 [H, W, 3|4] image as float grey (RGBA composited over ``background``)."""
    rgb = image[..., :3].astype(np.float32) / 255.0
    if image.shape[-1] == 4:
        alpha = image[..., 3:].astype(np.float32) / 255.0
        rgb = rgb * alpha + np.asarray(background, dtype=np.float32) * (1.0 - alpha)
    return rgb.mean(axis=-1)


def _magnitude(grey: np.ndarray) -> np.ndarray:
    """The centred magnitude spectrum's summed-area table [H + 1, W + 1] (a window's sum in four reads)."""
    spectrum = np.abs(np.fft.fftshift(np.fft.fft2(grey)))
    table = np.zeros((spectrum.shape[0] + 1, spectrum.shape[1] + 1))
    table[1:, 1:] = spectrum.cumsum(axis=0).cumsum(axis=1)
    return table


def _retained(table: np.ndarray, factor: float) -> float:
    """The magnitude inside the centred window an image shrunk by ``factor`` keeps."""
    height, width = table.shape[0] - 1, table.shape[1] - 1
    h, w = max(1, int(round(height / factor))), max(1, int(round(width / factor)))
    top, left = height // 2 - h // 2, width // 2 - w // 2  # the zero frequency sits at (H // 2, W // 2)
    return float(table[top + h, left + w] - table[top, left + w] - table[top + h, left] + table[top, left])


__all__ = ["ResolutionSchedule", "auto_schedule", "build_schedule", "check_resolution", "explicit_levels",
           "scale_resolution_steps"]
