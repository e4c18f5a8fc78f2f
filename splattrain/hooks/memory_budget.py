"""MemoryBudgetHook: keep predicted peak memory under a budget by capping the Gaussian count."""

from __future__ import annotations

import resource
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook, Priority

_MB = 1024.0 * 1024.0


def peak_resident_bytes() -> int:
    """Peak resident set size of this process so far."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def bytes_per_gaussian(model) -> int:
    """Parameter, gradient and two Adam moments per Gaussian, in bytes."""
    floats = sum(p[0].numel() for p in model.params.values())
    return floats * 4 * 4


@HOOKS.register()
class MemoryBudgetHook(Hook):
    """Steers densification so the predicted peak memory stays under ``max_memory`` GB.

    During ``warmup_steps`` it samples peak memory (CUDA: max allocated per step; CPU:
    the process's peak resident memory) with the Gaussian count and pixels per step, and
    fits ``peak = base + per_gaussian * N``; let densification start inside the warm-up so
    the slope is measured (otherwise a lower bound from the parameter and optimizer sizes
    is used). Afterwards, whenever densification pushes the
    count over what the budget allows it is capped: the densification strategy's own cap
    (``max_gaussians`` / MCMC's ``cap_max``) is lowered so growth stops there, and any
    excess is pruned, least opaque first (optimizer and strategy state follow). ``greedy`` fills the budget;
    ``conservative`` assumes 1.5x the fitted cost per Gaussian and keeps 15% of the
    headroom free. When a measured peak exceeds the prediction, the cost per Gaussian is
    raised to match and the cap lowered (it never rises). A hard ``max_gaussians`` cap is always
    honoured. Every ``debug_freq`` steps it logs the prediction and the measured peak.
    """

    priority = Priority.LOW

    def __init__(
        self,
        max_memory: float,
        warmup_steps: int = 100,
        strategy: str = "greedy",
        max_gaussians: Optional[int] = None,
        debug_freq: int = 100,
    ) -> None:
        super().__init__()
        if strategy not in ("greedy", "conservative"):
            raise ConfigError(f"MemoryBudgetHook strategy {strategy!r}: use 'greedy' or 'conservative'")
        self.budget = max_memory * 1024**3
        self.warmup_steps = warmup_steps
        self.strategy = strategy
        self.max_gaussians = max_gaussians
        self.debug_freq = debug_freq
        self.samples: List[Tuple[int, int, float]] = []  # (gaussians, pixels, peak bytes)
        self.base: Optional[float] = None
        self.per_gaussian: Optional[float] = None
        self.cap: Optional[int] = None
        self.pruned = 0

    # -- measuring -------------------------------------------------------------------
    def _peak(self, trainer) -> float:
        if trainer.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(trainer.device))
        return float(peak_resident_bytes())

    def before_train_iter(self, trainer, step: int, batch: Dict[str, Any]) -> None:
        if trainer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.device)

    def after_backward(self, trainer, step: int, outputs: Dict[str, Any]) -> None:
        if self.cap is None:
            pixels = int(outputs["render"].rgb[..., 0].numel())
            self.samples.append((trainer.model.num_gaussians, pixels, self._peak(trainer)))

    # -- the model ---------------------------------------------------------------------
    def fit(self, trainer) -> None:
        """Fit ``base`` and ``per_gaussian`` from the warm-up samples and derive the cap."""
        counts = torch.tensor([s[0] for s in self.samples], dtype=torch.float64)
        peaks = torch.tensor([s[2] for s in self.samples], dtype=torch.float64)
        slope = float(bytes_per_gaussian(trainer.model))
        if counts.max() > 1.2 * counts.min():  # enough spread to measure the slope
            centred = counts - counts.mean()
            slope = max(slope, float((centred * (peaks - peaks.mean())).sum() / centred.square().sum()))
        self.per_gaussian = slope * (1.5 if self.strategy == "conservative" else 1.0)
        self.base = float((peaks - slope * counts).max())
        self._update_cap(trainer)
        trainer.console.info(
            f"memory model: {self.base / _MB:.0f} MB + {self.per_gaussian / 1024:.2f} KB per Gaussian; "
            f"at most {self.cap} Gaussians under {self.budget / _MB:.0f} MB ({self.strategy})"
        )

    def _update_cap(self, trainer) -> None:
        assert self.base is not None and self.per_gaussian is not None
        headroom = self.budget - self.base
        if self.strategy == "conservative":
            headroom *= 0.85
        cap = max(1, int(headroom / self.per_gaussian))
        if self.max_gaussians is not None:
            cap = min(cap, self.max_gaussians)
        if self.base >= self.budget:
            trainer.console.warning(
                f"MemoryBudgetHook: the measured base {self.base / _MB:.0f} MB is over the budget "
                f"{self.budget / _MB:.0f} MB; keeping the Gaussian count at {cap}", once="memory_base"
            )
        self.cap = cap if self.cap is None else min(self.cap, cap)
        self._cap_strategy(trainer)

    def _correct(self, trainer) -> None:
        """Raise the per-Gaussian slope when the measured peak exceeds the prediction."""
        count = trainer.model.num_gaussians
        measured = self._peak(trainer)
        if count > 0 and measured > self.predicted(count):
            self.per_gaussian = (measured - self.base) / count
            self._update_cap(trainer)

    def _cap_strategy(self, trainer) -> None:
        """Lower the strategy's own growth cap to ``self.cap``."""
        strategy = trainer.strategy
        for attribute in ("max_gaussians", "cap_max"):
            current = getattr(strategy, attribute, None)
            if current is not None:
                setattr(strategy, attribute, self.cap if current <= 0 else min(current, self.cap))

    def after_load_checkpoint(self, trainer, checkpoint: Dict[str, Any]) -> None:
        if self.cap is not None:
            self._cap_strategy(trainer)

    def predicted(self, count: int) -> float:
        """Predicted peak bytes for ``count`` Gaussians."""
        assert self.base is not None and self.per_gaussian is not None
        return self.base + self.per_gaussian * count

    # -- steering ----------------------------------------------------------------------
    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.cap is None and step >= self.warmup_steps and self.samples:
            self.fit(trainer)
        elif self.cap is not None:
            self._correct(trainer)
        limit = self.cap if self.cap is not None else self.max_gaussians
        if limit is not None and trainer.model.num_gaussians > limit:
            self._prune_to(trainer, limit)
        if self.cap is not None and self.every_n_steps(trainer, self.debug_freq):
            predicted = self.predicted(trainer.model.num_gaussians) / _MB
            peak = self._peak(trainer) / _MB
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
        trainer.strategy.remove_gaussians(trainer.model.params, trainer.optimizers, trainer.strategy_state, drop)
        self.pruned += excess

    def after_run(self, trainer) -> None:
        summary = {"memory/run_peak_mb": self._peak(trainer) / _MB}
        if self.base is not None:
            summary["memory/warmup_peak_mb"] = max(s[2] for s in self.samples) / _MB
        trainer.writers.write_scalars(summary, trainer.step)

    def state_dict(self) -> Dict[str, Any]:
        return {"samples": self.samples, "base": self.base, "per_gaussian": self.per_gaussian,
                "cap": self.cap, "pruned": self.pruned}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.samples = [tuple(s) for s in state["samples"]]
        self.base, self.per_gaussian = state["base"], state["per_gaussian"]
        self.cap, self.pruned = state["cap"], state["pruned"]
