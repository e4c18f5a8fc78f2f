"""One Adam per Gaussian parameter group, and their learning-rate / momentum schedules."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import torch

from .adam import GaussianAdam, step_adam, visible_gaussians
from ..errors import ConfigError
from ..model.gaussians import GaussianModel
from .schedules import Schedule, build_schedule

#: Parameter groups, in the order the model stores them.
GROUPS = ("means", "scales", "quats", "opacities", "sh0", "shN")


def base_lrs(optim_cfg, scene_scale: float) -> Dict[str, float]:
    """The configured learning rate of every group; the means rate is scaled by ``scene_scale``."""
    lrs = {name: float(optim_cfg[f"{name}_lr"]) for name in GROUPS}
    lrs["means"] *= scene_scale
    return lrs


def build_optimizers(model: GaussianModel, optim_cfg, scene_scale: float) -> Dict[str, Any]:
    """An Adam per parameter (as gsplat's strategies expect), at each group's base rate.

    ``optim.fused``: ``auto`` (the compiled :class:`~splattrain.optim.adam.GaussianAdam` for CPU
    parameters when the CPU library loads, ``torch.optim.Adam`` otherwise), ``true`` (compiled,
    a ConfigError when it cannot be) or ``false`` (``torch.optim.Adam``). ``optim.sparse: true``
    updates only the Gaussians seen in the step (always a GaussianAdam).
    """
    lrs = base_lrs(optim_cfg, scene_scale)
    fused = str(optim_cfg.get("fused", "auto")).lower()
    if fused not in ("auto", "true", "false"):
        raise ConfigError(f"optim.fused must be auto, true or false, not {optim_cfg.get('fused')!r}")
    sparse = bool(optim_cfg.get("sparse", False))
    library = _adam_library(model.means.device, fused) if fused != "false" else None
    if library is None and not sparse and fused != "true":
        return {
            name: torch.optim.Adam([{"params": [param], "lr": lrs[name], "name": name}], eps=optim_cfg.eps)
            for name, param in model.params.items()
        }
    return {
        name: GaussianAdam([{"params": [param], "lr": lrs[name], "name": name}], eps=optim_cfg.eps,
                           library=library, sparse=sparse)
        for name, param in model.params.items()
    }


def _adam_library(device: torch.device, fused: str) -> Any:
    """The CPU library for a compiled Adam step, or None (``auto`` off the CPU or without one)."""
    from ..kernels.build import BuildError, load_library

    if device.type != "cpu":
        if fused == "true":
            raise ConfigError(f"optim.fused is true but the parameters are on '{device}'; the fused Adam runs on the CPU")
        return None
    try:
        return load_library()
    except BuildError as error:
        if fused == "true":
            raise ConfigError(f"optim.fused is true but the CPU library is unavailable: {error}") from None
        return None


def step_optimizers(optimizers: Dict[str, Any], infos: Iterable[Dict[str, Any]] = ()) -> None:
    """Step every optimizer: all :class:`GaussianAdam` together in one library call (restricted to
    the Gaussians the step's renders saw when they are sparse), any other by its own ``step()``."""
    fused = [opt for opt in optimizers.values() if isinstance(opt, GaussianAdam)]
    for optimizer in optimizers.values():
        if not isinstance(optimizer, GaussianAdam):
            optimizer.step()
    if fused:
        step_adam(fused, visible_gaussians(infos) if any(opt.sparse for opt in fused) else None)


def clear_grads(optimizers: Dict[str, torch.optim.Optimizer]) -> None:
    """Drop the gradients of every optimizer's parameters (``zero_grad(set_to_none=True)``
    without its per-call bookkeeping, which costs tens of microseconds per optimizer)."""
    for optimizer in optimizers.values():
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None


def schedule_specs(optim_cfg) -> Dict[str, Dict[str, Any]]:
    """The schedule spec of every scheduled group: ``optim.schedules``, plus the 3DGS position decay.

    Unless ``optim.schedules.means`` says otherwise, the means rate decays exponentially from
    ``means_lr`` to ``means_lr_final`` at the last step. Groups not named stay fixed.
    """
    specs = {name: dict(spec) for name, spec in optim_cfg.schedules.items()}
    unknown = sorted(set(specs) - set(GROUPS))
    if unknown:
        raise ConfigError(f"optim.schedules: {', '.join(unknown)} not a parameter group (groups: {', '.join(GROUPS)})")
    if "means" not in specs:  # a means rate of zero (frozen positions) stays zero
        ratio = optim_cfg.means_lr_final / optim_cfg.means_lr if optim_cfg.means_lr > 0 else 1.0
        specs["means"] = {"type": "exp", "min_ratio": ratio}
    return {name: specs[name] for name in GROUPS if name in specs}


def build_schedules(optim_cfg, max_steps: int) -> Dict[str, Schedule]:
    """A :class:`Schedule` per scheduled group (checked, errors name the config key)."""
    specs = schedule_specs(optim_cfg)
    return {name: build_schedule(spec, max_steps, f"optim.schedules.{name}") for name, spec in specs.items()}


class ParamScheduler:
    """Sets one optimizer's learning rate (and beta1, when scheduled) from a stateless schedule."""

    def __init__(self, optimizer: torch.optim.Optimizer, base_lr: float, schedule: Schedule) -> None:
        self.optimizer = optimizer
        self.base_lr = base_lr
        self.schedule = schedule

    def lr_at(self, step: int) -> float:
        """The learning rate once ``step`` steps are done."""
        return self.base_lr * self.schedule.factor(step)

    def step(self, step: int) -> None:
        """Set the rate (and beta1) for the step after ``step``."""
        lr, beta1 = self.lr_at(step), self.schedule.momentum(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
            if beta1 is not None:
                group["betas"] = (beta1, group["betas"][1])


def build_schedulers(
    optimizers: Dict[str, torch.optim.Adam], optim_cfg, scene_scale: float, max_steps: int
) -> List[ParamScheduler]:
    """A scheduler per scheduled group, already set for step 1 (warm-up starts low)."""
    lrs = base_lrs(optim_cfg, scene_scale)
    schedulers = [
        ParamScheduler(optimizers[name], lrs[name], schedule)
        for name, schedule in build_schedules(optim_cfg, max_steps).items()
    ]
    for scheduler in schedulers:
        scheduler.step(0)
    return schedulers
