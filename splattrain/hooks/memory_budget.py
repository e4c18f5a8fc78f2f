"""MemoryBudgetHook: keep predicted peak memory under a budget by capping the Gaussian count."""

from __future__ import annotations

import math
import resource
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from ..steps import Window
from . import state as state_values
from .base import Hook, Priority

_MB = 1024.0 * 1024.0

#: Lower bound on the bytes a rendered pixel costs in a training step (rendered RGB, alpha and
#: depth, the target, the loss's intermediates and their gradients), used when the warm-up
#: saw one image size only and a later step renders more pixels.
PIXEL_BYTES = 256.0

#: Per strategy: factor on the fitted costs, share of the headroom kept free, and the share of
#: the remaining headroom one densification step may take.
_STRATEGIES = {"greedy": (1.0, 0.0, 0.25), "conservative": (1.5, 0.15, 0.125)}


def peak_resident_bytes() -> int:
    """Peak resident set size of this process since it started or since the last
    :func:`reset_peak_resident` (Linux's VmHWM; elsewhere the lifetime peak)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_resident() -> bool:
    """Restart the peak resident set size from the current one (Linux); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def bytes_per_gaussian(model) -> int:
    """Lower bound on the bytes a Gaussian costs at the peak of a step: its parameters, their
    gradients and two Adam moments, plus the new copies of parameters and moments that exist
    next to the old ones while densification grows the model."""
    floats = sum(p[0].numel() for p in model.params.values())
    return floats * 4 * (4 + 3)


def _spread(values: torch.Tensor) -> bool:
    """Whether ``values`` vary enough (max > 1.2 min) to measure a slope against them."""
    return bool(values.max() > 1.2 * values.min())


@HOOKS.register()
class MemoryBudgetHook(Hook):
    """Steers densification so the predicted peak memory stays under ``max_memory`` GB.

    Every step, after the backward pass, it samples the peak memory since the previous
    sample, which covers the update, render and backward pass (CUDA: max allocated; CPU:
    the process's peak resident memory, restarted at each sample on Linux, where set-up
    transients such as image decoding are left out; elsewhere the lifetime peak) with the
    Gaussian count N and the pixels P rendered per step. At
    ``warmup_steps`` it fits ``peak = base + per_gaussian * N + per_pixel * P`` (let
    densification start inside the warm-up so the Gaussian slope is measured; a warm-up at
    one image size uses a lower bound per pixel) and derives the largest count the budget
    allows at the most pixels a step will render (the configured training resolution, so
    a coarse-to-fine schedule is accounted for). From then on, before each densification,
    the strategy's own cap (``max_gaussians``, which MCMC grows to) is set so one step may
    take only part of the headroom left below the cap (``greedy``: a quarter;
    ``conservative``: an eighth, with 1.5x the fitted costs and 15% of the headroom kept
    free). A new measured peak above the prediction for the most Gaussians since the
    previous sample raises the cost per Gaussian and lowers the cap (it never rises).
    ``greedy`` can exceed the budget at the first step that reveals a cost well above the
    fitted one; ``conservative`` leaves room for that. A count
    over the cap is pruned, least opaque first (optimizer and strategy state follow). A hard
    ``max_gaussians`` cap is always honoured. Every ``debug_freq`` steps it logs the
    prediction and the measured peak.
    """

    rank_consistent = True  # its readings are the largest over the ranks

    priority = Priority.LOW

    def __init__(
        self,
        max_memory: float,
        warmup_steps: Window = 100,
        strategy: str = "greedy",
        max_gaussians: Optional[int] = None,
        debug_freq: int = 100,
    ) -> None:
        super().__init__()
        if strategy not in _STRATEGIES:
            raise ConfigError(f"MemoryBudgetHook strategy {strategy!r}: use 'greedy' or 'conservative'")
        if max_memory <= 0:
            raise ConfigError(f"MemoryBudgetHook max_memory must be > 0 GB, not {max_memory}")
        if max_gaussians is not None and max_gaussians < 1:
            raise ConfigError(f"MemoryBudgetHook max_gaussians must be >= 1, not {max_gaussians}")
        self.budget = max_memory * 1024**3
        self.warmup_steps = warmup_steps
        self.strategy = strategy
        self.max_gaussians = max_gaussians
        self.debug_freq = debug_freq
        self.samples: List[Tuple[int, int, float]] = []  # (gaussians, pixels, peak bytes)
        self.base: Optional[float] = None
        self.per_gaussian: Optional[float] = None
        self.per_pixel: float = PIXEL_BYTES
        self.pixels = 0  # the most pixels a training step renders
        self.cap: Optional[int] = None
        self.pruned = 0
        self._recent_count = 0  # the most Gaussians since the previous sample
        self._measured = 0.0  # the peak at the previous sample
        self._interval_peaks = False  # whether each sample is the peak since the previous one
        self.run_peak = self.last_peak = 0.0

    # -- measuring -------------------------------------------------------------------
    def _peak(self, trainer) -> float:
        if trainer.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(trainer.device))
        return float(peak_resident_bytes())

    def before_run(self, trainer) -> None:
        """Check the strategy can cap its growth; note the configured training size (a resolution
        schedule shrinks the views only from ``before_train`` on)."""
        try:
            trainer.cap_gaussians(self.max_gaussians)
        except ConfigError as err:
            raise ConfigError(f"MemoryBudgetHook steers the cap on the number of Gaussians: {err}, "
                              "or disable the hook") from None
        largest = max(f.camera.width * f.camera.height for f in trainer.data.train_frames)
        self.pixels = max(self.pixels, largest * trainer.schedule.batch_size)

    def before_train(self, trainer) -> None:
        self._interval_peaks = self._reset_peak(trainer)
        self._limit_growth(trainer)  # a resumed run's cap applies from its first step

    def _reset_peak(self, trainer) -> bool:
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)
            return True
        return trainer.device.type == "cpu" and reset_peak_resident()

    def after_backward(self, trainer, step: int, outputs: Dict[str, Any]) -> None:
        """Sample, fit at the end of the warm-up, and bound the densification about to run."""
        count = trainer.model.num_gaussians
        # every rank acts on the largest reading of any rank, so all replicas take the same decisions
        pixels, measured = trainer.max_over_ranks([float(outputs["render"].rgb[..., 0].numel()), self._peak(trainer)])
        pixels = int(pixels)
        self.pixels = max(self.pixels, pixels)
        self.last_peak = measured
        self.run_peak = max(self.run_peak, measured)
        if self.cap is None:
            self.samples.append((count, pixels, measured))
            if step >= self.warmup_steps:
                self.fit(trainer)
        else:
            self._correct(trainer, max(count, self._recent_count), measured)
        self._recent_count = count
        if self._interval_peaks:  # the next sample covers this step's update and the next render
            self._reset_peak(trainer)
        self._limit_growth(trainer)

    # -- the model ---------------------------------------------------------------------
    def fit(self, trainer) -> None:
        """Fit the costs from the warm-up samples and derive the cap."""
        counts, pixels, peaks = torch.tensor(self.samples, dtype=torch.float64, device="cpu").unbind(1)  # host numbers: no device read
        per_gaussian = float(bytes_per_gaussian(trainer.model))
        per_pixel = PIXEL_BYTES
        columns = [c for c, varies in ((counts, _spread(counts)), (pixels, _spread(pixels))) if varies]
        if columns:  # least squares on what varied, the floors where it did not (or came out lower)
            design = torch.stack([torch.ones_like(peaks), *columns], dim=1)
            slopes = iter(torch.linalg.lstsq(design, peaks[:, None]).solution[1:, 0].tolist())
            if _spread(counts):
                per_gaussian = max(per_gaussian, next(slopes))
            if _spread(pixels):
                per_pixel = max(per_pixel, next(slopes))
        factor = _STRATEGIES[self.strategy][0]
        self.per_gaussian, self.per_pixel = per_gaussian * factor, per_pixel * factor
        self.base = float((peaks - per_gaussian * counts - per_pixel * pixels).max())
        self._measured = float(peaks.max())
        self._update_cap(trainer)
        trainer.console.info(
            f"memory model: {self.base / _MB:.0f} MB + {self.per_gaussian / 1024:.2f} KB per Gaussian "
            f"+ {self.per_pixel:.0f} B per pixel; at most {self.cap} Gaussians at {self.pixels} pixels "
            f"per step under {self.budget / _MB:.0f} MB ({self.strategy})"
        )

    def predicted(self, count: int, pixels: Optional[int] = None) -> float:
        """Predicted peak bytes for ``count`` Gaussians at ``pixels`` per step (default: the most)."""
        assert self.base is not None and self.per_gaussian is not None
        return self.base + self.per_gaussian * count + self.per_pixel * (self.pixels if pixels is None else pixels)

    def _update_cap(self, trainer) -> None:
        headroom = (self.budget - self.predicted(0)) * (1.0 - _STRATEGIES[self.strategy][1])
        cap = max(1, int(headroom / self.per_gaussian))
        if self.max_gaussians is not None:
            cap = min(cap, self.max_gaussians)
        if headroom <= 0:
            trainer.console.warning(
                f"MemoryBudgetHook: the predicted memory without Gaussians, {self.predicted(0) / _MB:.0f} MB, "
                f"is over the budget {self.budget / _MB:.0f} MB; keeping the Gaussian count at {cap}",
                once="memory_base",
            )
        self.cap = cap if self.cap is None else min(self.cap, cap)

    def _correct(self, trainer, count: int, measured: float) -> None:
        """Raise the per-Gaussian cost when a new peak, reached with at most ``count``
        Gaussians, exceeds the prediction for them. (Where peaks cannot be restarted, one
        that does not rise says nothing: it is the high-water mark of the whole run.)"""
        rose = measured > self._measured or self._interval_peaks
        self._measured = max(self._measured, measured)
        if rose and count > 0 and measured > self.predicted(count):
            self.per_gaussian = (measured - self.predicted(0)) / count
            self._update_cap(trainer)

    # -- steering ----------------------------------------------------------------------
    def _limit_growth(self, trainer) -> None:
        """Cap growth (with the strategy's own cap, which the trainer keeps): the hard cap, and once
        fitted, the current count plus the share of the headroom left to the cap one step may take."""
        limits = [x for x in (self.max_gaussians,) if x is not None]
        if self.cap is not None:
            count = trainer.model.num_gaussians
            share = _STRATEGIES[self.strategy][2]
            limits.append(min(self.cap, count + math.ceil(share * max(0, self.cap - count))))
        trainer.cap_gaussians(min(limits) if limits else None)

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        self._recent_count = max(self._recent_count, trainer.model.num_gaussians)
        limits = [x for x in (self.cap, self.max_gaussians) if x is not None]
        if limits and trainer.model.num_gaussians > min(limits):
            self._prune_to(trainer, min(limits))
        if self.cap is not None and self.every_n_steps(trainer, self.debug_freq):
            predicted = self.predicted(trainer.model.num_gaussians) / _MB
            peak = self.last_peak / _MB
            trainer.writers.write_scalars(
                {"memory/predicted_mb": predicted, "memory/measured_mb": peak, "memory/cap": float(self.cap)}, step
            )
            trainer.console.debug(f"memory at step {step}: predicted {predicted:.0f} MB, measured peak {peak:.0f} MB")

    @torch.no_grad()
    def _prune_to(self, trainer, limit: int) -> None:
        opacities = trainer.model.params["opacities"].detach()
        excess = trainer.model.num_gaussians - limit
        drop = torch.zeros_like(opacities, dtype=torch.bool)
        drop[torch.topk(opacities, excess, largest=False).indices] = True
        trainer.remove_gaussians(drop)
        self.pruned += excess

    def after_run(self, trainer) -> None:
        summary = {"memory/run_peak_mb": max(self.run_peak, self._peak(trainer)) / _MB}
        if self.samples:
            summary["memory/warmup_peak_mb"] = max(s[2] for s in self.samples) / _MB
        if self.cap is not None:
            summary.update({"memory/cap": float(self.cap), "memory/pruned": float(self.pruned)})
        trainer.writers.write_scalars(summary, trainer.step)

    def state_dict(self) -> Dict[str, Any]:
        return {"samples": self.samples, "base": self.base, "per_gaussian": self.per_gaussian,
                "per_pixel": self.per_pixel, "pixels": self.pixels, "cap": self.cap, "pruned": self.pruned,
                "run_peak": self.run_peak}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.samples = [(int(g), int(p), float(m)) for g, p, m in state_values.rows(state, "samples", 3)]
        self.base = state_values.number(state, "base", optional=True)
        self.per_gaussian = state_values.number(state, "per_gaussian", optional=True)
        self.per_pixel = state_values.number(state, "per_pixel", PIXEL_BYTES)
        self.pixels = state_values.whole(state, "pixels", 0, minimum=0)
        self.cap = state_values.whole(state, "cap", optional=True, minimum=1)
        self.pruned = state_values.whole(state, "pruned", minimum=0)
        self.run_peak = state_values.number(state, "run_peak", 0.0)
